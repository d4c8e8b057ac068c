import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { createInterface } from 'node:readline';
import { waitForProcState, withParentDeathSignal } from '../../../dev/processes.js';

const STOP_TIMEOUT_MS = 5_000;
const KEPT_LINES = 200;

export interface SpawnOptions {
  readonly name: string;
  readonly command: string;
  readonly args: readonly string[];
  readonly env?: NodeJS.ProcessEnv;
  /** Where stdout and stderr are copied. */
  readonly logFile: string;
}

/**
 * What the registry stops: an app instance, or a Redis node of the project's
 * redis-server harness (dev/redis/redis-nodes.ts).
 */
export interface StoppableProcess {
  /** Undefined once it has exited (a Redis node) or if it never started. */
  readonly pid: number | undefined;
  /** SIGTERM, then SIGKILL if it has not exited in time; resolves once it has. */
  stop(): Promise<void>;
  /** SIGKILL, sent before the first await: usable in a process 'exit' handler. */
  kill(): Promise<void>;
}

/**
 * A child process the demo started: its output is copied to a log file and
 * can be awaited line by line, and it can be paused, resumed and stopped.
 * Children run in their own process group, so a Ctrl-C in the terminal
 * reaches the demo only, which then stops them in order.
 */
export class ManagedProcess implements StoppableProcess {
  readonly exited: Promise<void>;
  private readonly child: ChildProcess;
  private readonly lines: string[] = [];
  private readonly watchers = new Set<(line: string) => void>();
  private paused = false;

  constructor(
    private readonly registry: ProcessRegistry,
    readonly options: SpawnOptions,
  ) {
    // On Linux the kernel kills the child should the demo die without cleaning up (SIGKILL, crash).
    const [command, ...args] = withParentDeathSignal([options.command, ...options.args]);
    this.child = spawn(command, args, {
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    // 'close', not 'exit': by then the last lines have been read.
    this.exited = once(this.child, 'close').then(
      () => undefined,
      () => undefined,
    );
    // A spawn failure (ENOENT) surfaces as an early exit in waitForLine.
    this.child.on('error', () => undefined);
    registry.add(this);
    void this.exited.then(() => registry.delete(this));

    const log = createWriteStream(options.logFile, { flags: 'a' });
    let open = 2;
    for (const stream of [this.child.stdout, this.child.stderr]) {
      if (!stream) continue;
      stream.pipe(log, { end: false });
      stream.once('end', () => --open === 0 && log.end());
      createInterface({ input: stream, crlfDelay: Infinity }).on('line', (line) =>
        this.onLine(line),
      );
    }
  }

  get name(): string {
    return this.options.name;
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get isRunning(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The last lines the process wrote, for error messages. */
  tail(count = 15): string {
    return this.lines.slice(-count).join('\n');
  }

  /**
   * Resolves with the first line written from now on that matches; rejects
   * if the process exits first or nothing matches within `timeoutMs`.
   */
  waitForLine(pattern: RegExp, timeoutMs: number): Promise<RegExpMatchArray> {
    return new Promise((resolve, reject) => {
      const settle = (error: Error | undefined, match?: RegExpMatchArray) => {
        clearTimeout(timer);
        this.watchers.delete(watch);
        if (error) reject(error);
        else resolve(match!);
      };
      const watch = (line: string) => {
        const match = pattern.exec(line);
        if (match) settle(undefined, match);
      };
      const timer = setTimeout(
        () =>
          settle(
            new Error(
              `${this.name} wrote no line matching ${pattern} within ${timeoutMs} ms. Its last lines:\n${this.tail()}`,
            ),
          ),
        timeoutMs,
      );
      this.watchers.add(watch);
      void this.exited.then(() =>
        settle(
          new Error(
            `${this.name} exited (${this.child.signalCode ?? this.child.exitCode}) before writing a line matching ${pattern}. ` +
              `Its last lines (full log: ${this.options.logFile}):\n${this.tail()}`,
          ),
        ),
      );
    });
  }

  /** SIGSTOP: the process keeps its sockets and timers but runs nothing until resume(). */
  async pause(): Promise<void> {
    if (!this.isRunning || this.paused) return;
    this.child.kill('SIGSTOP');
    this.paused = true;
    await waitForProcState(this.child.pid, (state) => state === 'T', this.name);
  }

  /** SIGCONT after pause(). */
  async resume(): Promise<void> {
    if (!this.isRunning || !this.paused) return;
    this.child.kill('SIGCONT');
    this.paused = false;
    await waitForProcState(this.child.pid, (state) => state !== 'T', this.name);
  }

  /** SIGTERM (after SIGCONT if paused), SIGKILL if it has not exited within 5 s. */
  async stop(): Promise<void> {
    if (this.isRunning) {
      this.child.kill('SIGTERM');
      if (this.paused) this.child.kill('SIGCONT');
      this.paused = false;
      const timer = setTimeout(() => this.child.kill('SIGKILL'), STOP_TIMEOUT_MS);
      await this.exited;
      clearTimeout(timer);
    }
    this.registry.delete(this);
  }

  /** SIGKILL at once; for the last resort in a process 'exit' handler. */
  async kill(): Promise<void> {
    if (!this.isRunning) return;
    this.child.kill('SIGKILL');
    await this.exited;
  }

  private onLine(line: string): void {
    this.lines.push(line);
    if (this.lines.length > KEPT_LINES) this.lines.shift();
    for (const watch of [...this.watchers]) watch(line);
  }
}

/** Every process the demo started, so all of them can be stopped on success, failure or Ctrl-C. */
export class ProcessRegistry {
  private readonly live = new Set<StoppableProcess>();
  private closed = false;

  /** Starts a process; refused once stopAll() was called, so nothing starts while the demo stops. */
  spawn(options: SpawnOptions): ManagedProcess {
    if (this.closed) throw new Error(`not starting ${options.name}: the demo is stopping`);
    return new ManagedProcess(this, options);
  }

  /** Also for processes started elsewhere: the Redis nodes. */
  add(process: StoppableProcess): void {
    this.live.add(process);
  }

  delete(process: StoppableProcess): void {
    this.live.delete(process);
  }

  get size(): number {
    return this.live.size;
  }

  /** The processes still running. */
  list(): StoppableProcess[] {
    return [...this.live];
  }

  async stopAll(): Promise<void> {
    this.closed = true;
    await Promise.all(
      [...this.live].map(async (process) => {
        await process.stop();
        this.live.delete(process);
      }),
    );
  }

  killAllNow(): void {
    for (const process of this.live) void process.kill();
  }
}
