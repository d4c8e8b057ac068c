/**
 * The five commands, by name. Each reads the nodes through the engine's
 * administration functions, prints a table (or JSON) and resolves to its exit
 * code: 0 done, 1 failed. Usage mistakes found only once connected throw
 * UsageError (2).
 */
import type { CommandName } from '../command-line.js';
import type { CommandRunner } from './context.js';
import { health } from './health.js';
import { inspect } from './inspect.js';
import { list } from './list.js';
import { release } from './release.js';
import { reseed } from './reseed.js';

export type { CommandContext } from './context.js';

export const COMMAND_RUNNERS: Readonly<Record<CommandName, CommandRunner>> = {
  inspect,
  list,
  release,
  reseed,
  health,
};
