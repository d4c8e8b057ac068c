/** `release <resource>`: force-release a stuck lock, whoever holds it, after asking. */
import { judgeLock } from '../../engine/internal.js';
import { plural } from '../cli-output.js';
import { BIN } from '../command-line.js';
import { EXIT_FAILED, EXIT_OK } from '../exit-codes.js';
import type { CommandContext } from './context.js';
import { inspectionJson, nodeTable, summary } from './lock-report.js';

export async function release({ engine, request, term, confirm }: CommandContext): Promise<number> {
  const resource = request.target!;
  const before = judgeLock(await engine.inspect(resource), engine.quorum);
  const total = engine.nodes.length;
  if (before.keyed === 0) {
    const silent = total - before.answered;
    term.note(
      `${BIN}: '${resource}' is not locked on any node that answered` +
        (silent > 0 ? ` (${silent} of ${plural(total, 'node')} did not)` : '') +
        `: nothing to release. '${BIN} list' shows the locked resources.`,
    );
    return EXIT_FAILED;
  }
  if (!request.json) {
    term.print(summary(engine, term, before));
    term.print();
    nodeTable(engine, term, before);
    term.print();
  }
  if (!request.yes) {
    const yes = await confirm(
      `Force-release '${resource}'? Its holder is not told; its fencing token keeps its late writes out. [y/N] `,
    );
    if (!yes) {
      term.note('Not released.');
      return EXIT_FAILED;
    }
  }
  const deleted = await engine.forceRelease(resource);
  const short = before.answered < engine.quorum;
  if (request.json) {
    term.print(
      JSON.stringify(
        {
          resource,
          released: deleted > 0,
          deleted,
          nodes: total,
          before: inspectionJson(engine, before),
        },
        null,
        2,
      ),
    );
  } else if (deleted > 0) {
    term.print(
      `${term.paint('Released', 'good')} '${resource}': deleted its key on ${deleted} of ${plural(total, 'node')} and woke its waiters.`,
    );
  }
  if (deleted === 0) {
    term.note(`${BIN}: no node had the key any more: '${resource}' ended meanwhile.`);
    return EXIT_FAILED;
  }
  if (short) {
    term.note(
      term.paintErr(
        `Only ${before.answered} of ${plural(total, 'node')} answered; keys on the others expire with their lease.`,
        'bad',
      ),
    );
    return EXIT_FAILED;
  }
  return EXIT_OK;
}
