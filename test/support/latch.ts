/**
 * Lets a test hold a handler mid-flight: the handler calls `enter(name)` and
 * waits there until the test calls `open(name)`; the test awaits `entered(name)`.
 * No timing guesses: every step is an awaited event.
 */
export class Latches {
  private readonly gates = new Map<
    string,
    { entered: Deferred<void>; open: Deferred<void>; count: number }
  >();
  /** Names in the order handlers entered them. */
  readonly log: string[] = [];

  private gate(name: string) {
    let gate = this.gates.get(name);
    if (!gate) {
      gate = { entered: deferred<void>(), open: deferred<void>(), count: 0 };
      this.gates.set(name, gate);
    }
    return gate;
  }

  /** Called by the handler: records the entry and waits until the test opens the gate. */
  async enter(name: string): Promise<void> {
    const gate = this.gate(name);
    gate.count++;
    this.log.push(name);
    gate.entered.resolve();
    await gate.open.promise;
  }

  /** Resolves once a handler has entered `name`. */
  entered(name: string): Promise<void> {
    return this.gate(name).entered.promise;
  }

  /** How many handlers have entered `name`. */
  count(name: string): number {
    return this.gates.get(name)?.count ?? 0;
  }

  open(name: string): void {
    this.gate(name).open.resolve();
  }

  reset(): void {
    for (const gate of this.gates.values()) gate.open.resolve();
    this.gates.clear();
    this.log.length = 0;
  }
}

export interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

export function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
