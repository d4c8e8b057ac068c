import { formatMs } from '../../../dev/text.js';

/**
 * What the demo prints, TTY-aware: a live progress line redrawn in place
 * when the stream is a terminal, plain lines otherwise; colours only on a
 * terminal and without NO_COLOR.
 */
export class Output {
  readonly live: boolean;
  private readonly color: boolean;
  private progressShown = false;
  private muted = false;

  constructor(private readonly stream: NodeJS.WritableStream & { isTTY?: boolean }) {
    this.live = stream.isTTY === true;
    this.color = this.live && !process.env.NO_COLOR;
  }

  /** An Output that prints nothing (for tests). */
  static silent(): Output {
    return new Output({ write: () => true } as unknown as NodeJS.WritableStream);
  }

  line(text = ''): void {
    if (this.muted) return;
    this.clearProgress();
    this.stream.write(`${text}\n`);
  }

  /** Redraws the progress line; nothing when the stream is not a terminal. */
  progress(text: string): void {
    if (!this.live || this.muted) return;
    this.stream.write(`\r\x1b[2K${text}`);
    this.progressShown = true;
  }

  /** Prints nothing from now on (the demo was interrupted; what is still running is being stopped). */
  mute(): void {
    this.clearProgress();
    this.muted = true;
  }

  clearProgress(): void {
    if (!this.progressShown) return;
    this.stream.write('\r\x1b[2K');
    this.progressShown = false;
  }

  ok(text: string): string {
    return `${this.paint('32', '✔')} ${text}`;
  }

  fail(text: string): string {
    return `${this.paint('31', '✘')} ${text}`;
  }

  note(text: string): string {
    return `${this.paint('33', '!')} ${text}`;
  }

  bold(text: string): string {
    return this.paint('1', text);
  }

  dim(text: string): string {
    return this.paint('2', text);
  }

  private paint(code: string, text: string): string {
    return this.color ? `\x1b[${code}m${text}\x1b[0m` : text;
  }
}

export function bar(done: number, total: number, width = 24): string {
  const filled = total > 0 ? Math.round((done / total) * width) : width;
  return `[${'█'.repeat(filled)}${'░'.repeat(width - filled)}]`;
}

/** Durations as the demo prints them: whole ms, and seconds from one second on. */
export function ms(value: number): string {
  return formatMs(value, { secondsFrom: 1000, fractions: false });
}
