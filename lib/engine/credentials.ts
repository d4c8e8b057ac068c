/** Masks the user and password of any URL in `text`, for messages that echo a node's spec. */
export function hideCredentials(text: string): string {
  return text.replace(/([a-z][\w+.-]*:\/\/)[^@/\s]*@/gi, '$1***@');
}
