/**
 * `inspect <resource>`: holder, lease and fence counter of one lock on every
 * node, and the read-write lock and the semaphore of that name when it has them.
 */
import { BIN } from '../command-line.js';
import { EXIT_FAILED, EXIT_OK } from '../exit-codes.js';
import type { CommandContext } from './context.js';
import { leaseJson, leaseSection } from './lease-report.js';
import { inspectionJson, nodeTable, summary } from './lock-report.js';
import { readName } from './read-name.js';

export async function inspect({ engine, request, term }: CommandContext): Promise<number> {
  const resource = request.target!;
  const { lock: judged, ...leases } = await readName(engine, resource, request.permits);
  const others = [leases.readWrite, leases.semaphore].filter((inspection) => inspection.present);
  // A lock without a key anywhere says nothing beside the read-write lock or semaphore of its name.
  const showLock = others.length === 0 || judged.verdict !== 'free' || judged.keyed > 0;
  if (request.json) {
    term.print(
      JSON.stringify(
        {
          ...inspectionJson(engine, judged),
          readWrite: leases.readWrite.present ? leaseJson(engine, leases.readWrite) : null,
          semaphore: leases.semaphore.present ? leaseJson(engine, leases.semaphore) : null,
        },
        null,
        2,
      ),
    );
  } else {
    if (showLock) {
      term.print(summary(engine, term, judged));
      term.print();
      nodeTable(engine, term, judged);
    }
    others.forEach((inspection, i) => {
      if (showLock || i > 0) term.print();
      leaseSection(engine, term, inspection);
    });
    if (others.length === 0 && judged.verdict === 'free' && /[*?[]/.test(resource)) {
      term.note(
        `inspect takes one resource name, not a pattern; to search, run: ${BIN} list '${resource}'`,
      );
    }
  }
  const shown = [...(showLock ? [judged.verdict] : []), ...others.map((o) => o.verdict)];
  return shown.includes('unknown') ? EXIT_FAILED : EXIT_OK;
}
