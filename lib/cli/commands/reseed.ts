/** `reseed [pattern]`: raise the fence counters of a node that lost its data. */
import {
  compareCounterLifetimes,
  explainNodeError,
  LockUnavailableError,
  sampleCounterLifetimes,
} from '../../engine/internal.js';
import { plural } from '../cli-output.js';
import { BIN } from '../command-line.js';
import { formatDuration } from '../durations.js';
import { EXIT_FAILED, EXIT_OK, UsageError } from '../exit-codes.js';
import { READ_TIMEOUT_MS, type CommandContext } from './context.js';

/**
 * Whether the nodes' fence counters expire, from a sample of them: raising
 * counters that never expire with a lifetime would let them lapse and count
 * from 1 again, so a lifetime that does not match the app's is refused.
 */
async function checkCounterLifetime({ engine, request, term }: CommandContext, pattern: string) {
  const ttl = request.fenceCounterTtl;
  const sample = await sampleCounterLifetimes(
    engine.nodes,
    request.keyPrefix,
    pattern,
    READ_TIMEOUT_MS,
  );
  const mismatch = compareCounterLifetimes(sample, ttl);
  if (mismatch?.kind === 'would-lapse') {
    throw new UsageError(
      `the fence counters on ${mismatch.nodes.join(', ')} never expire, so the app runs with fenceCounterTtl 0: ` +
        `write --fence-counter-ttl 0 (raised with a lifetime of ${ttl} ms, they would lapse and count from 1 again)`,
    );
  }
  if (mismatch?.kind === 'kept-forever') {
    term.note(
      term.paintErr(
        `The fence counters on ${mismatch.nodes.join(', ')} expire, but --fence-counter-ttl 0 raises them for good: ` +
          "safe, but they will not be cleaned up; pass the app's fenceCounterTtl next time.",
        'warn',
      ),
    );
  }
}

export async function reseed(context: CommandContext): Promise<number> {
  const { engine, request, term } = context;
  const pattern = request.target ?? '*';
  await checkCounterLifetime(context, pattern);
  let raised: Record<string, number>;
  try {
    raised = await engine.reseedFences(pattern);
  } catch (error) {
    if (!(error instanceof LockUnavailableError)) throw error;
    const failures = error.failures.map((failure) => {
      const node = engine.nodes.find((n) => n.label === failure.node);
      return `${failure.node}: ${explainNodeError(node, failure.error.message)}`;
    });
    term.note(
      `${BIN}: reseed needs every node to answer, and ${failures.length} of ${plural(engine.nodes.length, 'node')} did not ` +
        `(${failures.join('; ')}). Nothing is lost: counters are only ever raised. Run it again once they answer.`,
    );
    return EXIT_FAILED;
  }
  const total = Object.values(raised).reduce((sum, n) => sum + n, 0);
  if (request.json) {
    term.print(
      JSON.stringify({ pattern, fenceCounterTtl: request.fenceCounterTtl, raised, total }, null, 2),
    );
    return EXIT_OK;
  }
  term.table(
    [{ title: 'NODE' }, { title: 'RAISED', align: 'right' }],
    Object.entries(raised).map(([node, count]) => [
      node,
      count > 0 ? { text: String(count), tone: 'warn' } : '0',
    ]),
  );
  term.print();
  const lifetime =
    request.fenceCounterTtl === 0
      ? 'raised counters never expire'
      : `raised per-resource counters live ${formatDuration(request.fenceCounterTtl)}; a node's own counter never expires`;
  term.print(
    total === 0
      ? `Every fence counter matching '${pattern}' was already at its highest value on every node.`
      : `Raised ${plural(total, 'fence counter')} to the highest value any node had ` +
          `(matching '${pattern}'; ${lifetime}).`,
  );
  return EXIT_OK;
}
