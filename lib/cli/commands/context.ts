import type { LockEngine } from '../../engine/internal.js';
import type { Terminal } from '../cli-output.js';
import type { CommandRequest } from '../parse-arguments.js';

/** What a command runs with. Each command resolves to its exit code (exit-codes.ts). */
export interface CommandContext {
  readonly engine: LockEngine;
  readonly request: CommandRequest;
  readonly term: Terminal;
  /** Asks a yes/no question on the terminal; true for yes. */
  readonly confirm: (question: string) => Promise<boolean>;
}

export type CommandRunner = (context: CommandContext) => Promise<number>;

/** How long a node may take over one of the tool's own reads (counter lifetimes, set-up). */
export const READ_TIMEOUT_MS = 2500;
