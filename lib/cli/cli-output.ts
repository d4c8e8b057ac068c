/**
 * What the command-line tool writes: aligned tables, colour only for a
 * terminal that wants it, and never a password (durations: durations.ts).
 */

/** What a value means to the reader, shown as a colour on a terminal. */
export type Tone = 'good' | 'bad' | 'warn' | 'dim' | 'bold';

const ANSI: Record<Tone, readonly [open: number, close: number]> = {
  good: [32, 39],
  bad: [31, 39],
  warn: [33, 39],
  dim: [2, 22],
  bold: [1, 22],
};

/** A table cell: plain text, or text with a tone. */
export type Cell = string | { readonly text: string; readonly tone: Tone };

export interface Column {
  readonly title: string;
  /** Numbers read best right-aligned. Default 'left'. */
  readonly align?: 'left' | 'right';
}

interface Stream {
  write(text: string): unknown;
  readonly isTTY?: boolean;
}

/**
 * Colour only on a terminal, and never when NO_COLOR is set to anything
 * (https://no-color.org) or the terminal is dumb.
 */
export function wantsColor(stream: Stream, env: NodeJS.ProcessEnv): boolean {
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return false;
  if (env.TERM === 'dumb') return false;
  return stream.isTTY === true;
}

/**
 * Hides the passwords of Redis URLs in any text: the password part of every
 * `scheme://user:password@` and every `password=` query parameter, and the
 * literal passwords of the URLs it was given (which an error message could
 * quote without the URL around them).
 */
export class SecretMask {
  private readonly literals = new Set<string>();

  /** Remembers the password of `url`, if it is a URL with one. */
  addUrl(url: string): void {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      return;
    }
    for (const secret of [parsed.password, parsed.searchParams.get('password') ?? '']) {
      this.addLiteral(secret);
      try {
        this.addLiteral(decodeURIComponent(secret));
      } catch {
        // not valid percent-encoding: the raw form is already remembered
      }
    }
  }

  mask(text: string): string {
    let masked = text
      .replace(/(\b[a-z][a-z0-9+.-]*:\/\/[^\s:/@,]*:)[^\s,]*@/gi, '$1***@')
      .replace(/([?&]password=)[^&\s,'"]*/gi, '$1***');
    // Longest first, so a password that contains another is hidden whole.
    for (const literal of [...this.literals].sort((a, b) => b.length - a.length)) {
      masked = masked.split(literal).join('***');
    }
    return masked;
  }

  private addLiteral(secret: string): void {
    // Shorter ones would garble ordinary words; the URL patterns above still catch them.
    if (secret.length >= 4 && secret !== '***') this.literals.add(secret);
  }
}

/** The tool's two output streams, with colour decided once and secrets masked on the way out. */
export class Terminal {
  constructor(
    private readonly out: Stream,
    private readonly err: Stream,
    private readonly secrets: SecretMask,
    private readonly outColor: boolean,
    private readonly errColor: boolean,
  ) {}

  /** A line (or lines) on stdout. */
  print(text = ''): void {
    this.out.write(`${this.secrets.mask(text)}\n`);
  }

  /** A line on stderr: notes, warnings, prompts and errors stay out of piped results. */
  note(text: string): void {
    this.err.write(`${this.secrets.mask(text)}\n`);
  }

  /** `text` in its tone on stdout when colour is on. */
  paint(text: string, tone: Tone): string {
    return this.outColor ? paint(text, tone) : text;
  }

  /** `text` in its tone on stderr when colour is on. */
  paintErr(text: string, tone: Tone): string {
    return this.errColor ? paint(text, tone) : text;
  }

  table(columns: readonly Column[], rows: readonly (readonly Cell[])[]): void {
    this.print(formatTable(columns, rows, this.outColor));
  }

  mask(text: string): string {
    return this.secrets.mask(text);
  }
}

function paint(text: string, tone: Tone): string {
  const [open, close] = ANSI[tone];
  return `\u001b[${open}m${text}\u001b[${close}m`;
}

/**
 * Columns padded to their widest cell, two spaces apart, with no trailing
 * blanks; colour goes on after padding, so it never skews the alignment.
 */
export function formatTable(
  columns: readonly Column[],
  rows: readonly (readonly Cell[])[],
  color = false,
): string {
  const text = (cell: Cell | undefined) => (typeof cell === 'object' ? cell.text : (cell ?? ''));
  const widths = columns.map((column, i) =>
    Math.max(column.title.length, ...rows.map((row) => text(row[i]).length)),
  );
  const line = (cells: readonly Cell[], header: boolean) =>
    columns
      .map((column, i) => {
        const cell = cells[i];
        const content = text(cell);
        const last = i === columns.length - 1;
        const padded =
          column.align === 'right'
            ? content.padStart(widths[i])
            : last
              ? content
              : content.padEnd(widths[i]);
        if (!color) return padded;
        if (header) return paint(padded, 'bold');
        return typeof cell === 'object' ? paint(padded, cell.tone) : padded;
      })
      .join('  ')
      .trimEnd();
  return [
    line(
      columns.map((c) => c.title),
      true,
    ),
    ...rows.map((row) => line(row, false)),
  ].join('\n');
}

/** `1 node`, `3 nodes`. */
export function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}
