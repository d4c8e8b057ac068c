/**
 * How a run of the tool ends: its exit codes, and the error that ends it as a
 * usage mistake.
 */

export const EXIT_OK = 0;
/** Nodes unreachable, no quorum, nothing to release, or declined. */
export const EXIT_FAILED = 1;
export const EXIT_USAGE = 2;

/** A mistake in the command line: exit code 2 and one line saying what to write. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}
