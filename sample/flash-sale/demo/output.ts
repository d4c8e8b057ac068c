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

export function count(value: number): string {
  return value.toLocaleString('en-US');
}

export function ms(value: number): string {
  return value >= 1000 ? `${(value / 1000).toFixed(1)} s` : `${Math.round(value)} ms`;
}

/** A table with the first column left-aligned and the others right-aligned. */
export function table(rows: readonly (readonly string[])[], indent = '  '): string[] {
  const widths = rows[0].map((_, c) => Math.max(...rows.map((row) => row[c].length)));
  return rows.map(
    (row) =>
      indent +
      row
        .map((cell, c) => (c === 0 ? cell.padEnd(widths[c]) : cell.padStart(widths[c])))
        .join('   ')
        .trimEnd(),
  );
}
