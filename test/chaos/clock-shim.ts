/**
 * The clock-shift shim (clock-shift.c): compiled at test time into a run's
 * temp dir and loaded with LD_PRELOAD into a process whose wall clock a test
 * moves by writing a number of milliseconds to the file it names.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const shimSource = fileURLToPath(new URL('./clock-shift.c', import.meta.url));

/** Compiles the shim into `dir`; returns the library's path. */
export function buildClockShim(dir: string): string {
  const library = join(dir, 'libclockshift.so');
  try {
    execFileSync('cc', ['-shared', '-fPIC', '-O2', '-std=gnu11', '-o', library, shimSource], {
      stdio: 'pipe',
    });
  } catch (error) {
    throw new Error(
      `could not compile test/chaos/clock-shift.c with cc (the C toolchain node-gyp uses): ${(error as Error).message}`,
    );
  }
  return library;
}

/** The environment that starts a process with its wall clock `shiftMs` off, movable through `file`. */
export function shiftedClockEnv(
  library: string,
  file: string,
  shiftMs = 0,
): Record<string, string> {
  writeFileSync(file, String(shiftMs));
  return { LD_PRELOAD: library, CLOCK_SHIFT_FILE: file };
}
