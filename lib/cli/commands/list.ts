/** `list [pattern]`: the locks whose resource matches a pattern, each inspected. */
import { judgeLock } from '../../engine/internal.js';
import { plural } from '../cli-output.js';
import { formatLease } from '../durations.js';
import { EXIT_FAILED, EXIT_OK } from '../exit-codes.js';
import type { CommandContext } from './context.js';
import { verdictCell } from './lock-report.js';

/** How many resources are inspected at once. */
const INSPECT_WIDTH = 50;

/** Runs `work` over `items`, `width` at a time, keeping their order. */
async function mapBounded<T, R>(
  items: readonly T[],
  width: number,
  work: (item: T) => Promise<R>,
): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i += width) {
    results.push(...(await Promise.all(items.slice(i, i + width).map(work))));
  }
  return results;
}

export async function list({ engine, request, term }: CommandContext): Promise<number> {
  const pattern = request.target ?? '*';
  // The listing skips nodes that do not answer, which is complete for held locks only with a quorum.
  const health = await engine.health();
  const up = health.nodes.filter((n) => n.up).length;
  const resources = await engine.list(pattern, request.limit);
  const judged = await mapBounded(resources, INSPECT_WIDTH, async (resource) =>
    judgeLock(await engine.inspect(resource), engine.quorum),
  );
  const limitReached = resources.length >= request.limit;
  const failed = !health.quorum;
  if (request.json) {
    term.print(
      JSON.stringify(
        {
          pattern,
          limit: request.limit,
          limitReached,
          quorum: { required: engine.quorum, nodes: engine.nodes.length, answered: up },
          locks: judged.map(({ inspection, verdict, holding }) => ({
            resource: inspection.resource,
            verdict,
            holder: inspection.holder ?? null,
            lease: inspection.ttl ?? null,
            fence: inspection.fence ?? null,
            holding,
          })),
        },
        null,
        2,
      ),
    );
  } else if (judged.length === 0) {
    term.print(`No locks match '${pattern}'.`);
  } else {
    term.table(
      [
        { title: 'RESOURCE' },
        { title: 'STATE' },
        { title: 'HOLDER' },
        { title: 'NODES', align: 'right' },
        { title: 'LEASE', align: 'right' },
        { title: 'FENCE', align: 'right' },
      ],
      judged.map(({ inspection, verdict, holding }) => [
        inspection.resource,
        verdictCell(verdict),
        inspection.holder ?? '-',
        verdict === 'held' ? `${holding}/${engine.nodes.length}` : '-',
        formatLease(inspection.ttl),
        inspection.fence === undefined ? '-' : String(inspection.fence),
      ]),
    );
    term.print();
    term.print(
      `${plural(judged.length, 'resource')} matching '${pattern}'` +
        (limitReached ? ` (stopped at --limit ${request.limit}; there may be more)` : '') +
        '.',
    );
  }
  if (up < engine.nodes.length) {
    term.note(
      term.paintErr(
        failed
          ? `Only ${up} of ${plural(engine.nodes.length, 'node')} answered, fewer than the quorum of ${engine.quorum}: locks may be missing.`
          : `${engine.nodes.length - up} of ${plural(engine.nodes.length, 'node')} did not answer; with a quorum up, every held lock is listed.`,
        failed ? 'bad' : 'warn',
      ),
    );
  }
  return failed ? EXIT_FAILED : EXIT_OK;
}
