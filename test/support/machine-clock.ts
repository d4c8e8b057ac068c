/**
 * Milliseconds (sub-millisecond precision) on the machine's monotonic clock,
 * for tests that put events from several processes on one time line.
 *
 * `process.hrtime.bigint()` reads CLOCK_MONOTONIC on Linux, which the kernel
 * keeps for the whole machine, so readings from different processes compare
 * directly. `performance.timeOrigin + performance.now()` does not: its base
 * is a wall-clock reading taken when each process starts, and two processes'
 * bases can disagree by milliseconds (the stall between the reads under load,
 * a clock slew), enough to make two holders that followed each other look
 * like an overlap.
 */
export const machineNow = (): number => Number(process.hrtime.bigint()) / 1e6;
