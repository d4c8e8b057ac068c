#!/usr/bin/env node
/**
 * The `nestjs-redis-lock` command: inspect, list and force-release locks,
 * re-seed fence counters and check the nodes. `nestjs-redis-lock --help`.
 */
import { runCli } from './lock-cli.js';

// `... | head` closes the pipe early: that is the reader's choice, not a failure.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(process.exitCode ?? 0);
  throw error;
});

process.exitCode = await runCli(process.argv.slice(2), {
  stdin: process.stdin,
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
});
