import { readFileSync } from 'node:fs';

/**
 * Where the machine's CPU time went during a run: this process, the bench's
 * redis-servers, and everything else. "Everything else" is what makes two
 * runs of the same bench differ; the report prints it.
 */
export interface CpuShares {
  readonly seconds: number;
  /** Average cores busy, by whom. */
  readonly bench: number;
  readonly redis: number;
  /** Processes the bench started besides the redis-servers (scenario 4's Nest app). */
  readonly children: number;
  readonly others: number;
  readonly cores: number;
}

export const TICKS_PER_SECOND = 100; // USER_HZ on Linux

function busyTicks(): { busy: number; total: number } | undefined {
  try {
    const fields = readFileSync('/proc/stat', 'utf8')
      .split('\n')[0]
      .trim()
      .split(/\s+/)
      .slice(1)
      .map(Number);
    const total = fields.slice(0, 8).reduce((a, b) => a + b, 0);
    const idle = fields[3] + fields[4];
    return { busy: total - idle, total };
  } catch {
    return undefined;
  }
}

/** CPU time (user + system) a process has used so far, in clock ticks (1/100 s); 0 where /proc is not there. */
export function processTicks(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
      .replace(/^.*\) /s, '')
      .split(' ');
    // After the command name: state is field 0, utime field 11, stime field 12.
    return Number(stat[11]) + Number(stat[12]);
  } catch {
    return 0;
  }
}

export class CpuAccount {
  private readonly start = performance.now();
  private readonly machine = busyTicks();
  private readonly own = process.cpuUsage();
  private readonly redis: number;
  private readonly children: number;

  constructor(
    private readonly redisPids: () => readonly (number | undefined)[],
    /** Clock ticks used so far by the bench's other child processes, live and exited. */
    private readonly childTicks: () => number = () => 0,
  ) {
    this.redis = this.redisTicks();
    this.children = childTicks();
  }

  private redisTicks(): number {
    return this.redisPids().reduce<number>((sum, pid) => sum + processTicks(pid), 0);
  }

  /** Shares since construction; undefined where /proc is not there. */
  shares(): CpuShares | undefined {
    const now = busyTicks();
    if (!this.machine || !now) return undefined;
    const seconds = (performance.now() - this.start) / 1000;
    const cores = (now.total - this.machine.total) / TICKS_PER_SECOND / seconds;
    const busy = (now.busy - this.machine.busy) / TICKS_PER_SECOND;
    const own = process.cpuUsage(this.own);
    const bench = (own.user + own.system) / 1e6;
    const redis = (this.redisTicks() - this.redis) / TICKS_PER_SECOND;
    const children = (this.childTicks() - this.children) / TICKS_PER_SECOND;
    return {
      seconds,
      cores,
      bench: bench / seconds,
      redis: redis / seconds,
      children: children / seconds,
      others: Math.max(0, busy - bench - redis - children) / seconds,
    };
  }
}

export function describeCpu(shares: CpuShares): string {
  const c = (v: number) => v.toFixed(2);
  return (
    `CPU over ${Math.round(shares.seconds)} s (in cores of ${Math.round(shares.cores)}): bench process ${c(shares.bench)}, ` +
    `its redis-servers ${c(shares.redis)}, ` +
    (shares.children > 0.005
      ? `its child processes (Nest apps, hand-off workers) ${c(shares.children)}, `
      : '') +
    `other processes ${c(shares.others)}`
  );
}
