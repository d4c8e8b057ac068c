import type { LoggerService, LogLevel } from '@nestjs/common';

export interface LogLine {
  readonly level: LogLevel;
  readonly message: string;
  /** The Nest context (the last string argument), e.g. 'RedisLock'. */
  readonly context: string | undefined;
  /** Every argument, stack traces included, as text. */
  readonly text: string;
}

function render(value: unknown): string {
  if (value instanceof Error) return `${value.stack ?? value.message}`;
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

/**
 * A Nest logger that keeps every line at every level, for
 * `NestFactory.create(Module, { logger: capture })`.
 */
export class LogCapture implements LoggerService {
  readonly lines: LogLine[] = [];

  log(message: unknown, ...rest: unknown[]): void {
    this.push('log', message, rest);
  }
  error(message: unknown, ...rest: unknown[]): void {
    this.push('error', message, rest);
  }
  warn(message: unknown, ...rest: unknown[]): void {
    this.push('warn', message, rest);
  }
  debug(message: unknown, ...rest: unknown[]): void {
    this.push('debug', message, rest);
  }
  verbose(message: unknown, ...rest: unknown[]): void {
    this.push('verbose', message, rest);
  }
  fatal(message: unknown, ...rest: unknown[]): void {
    this.push('fatal', message, rest);
  }

  /** The lines of one context (default 'RedisLock'), optionally of one level. */
  of(context = 'RedisLock', level?: LogLevel): LogLine[] {
    return this.lines.filter((l) => l.context === context && (!level || l.level === level));
  }

  /** Everything logged, as one text. */
  get text(): string {
    return this.lines.map((l) => `[${l.level}] ${l.text}`).join('\n');
  }

  clear(): void {
    this.lines.length = 0;
  }

  private push(level: LogLevel, message: unknown, rest: unknown[]): void {
    const last = rest.at(-1);
    const context = typeof last === 'string' ? last : undefined;
    this.lines.push({
      level,
      message: render(message),
      context,
      text: [message, ...rest].map(render).join(' '),
    });
  }
}
