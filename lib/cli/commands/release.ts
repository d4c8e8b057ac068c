/**
 * `release <resource>`: force-release a stuck lock, whoever holds it, after
 * asking; or the holders of the read-write lock or semaphore of that name.
 */
import {
  readWriteLock,
  semaphore,
  type JudgedLock,
  type LeaseInspection,
  type ReadWriteInspection,
  type SemaphoreInspection,
} from '../../engine/internal.js';
import { plural } from '../cli-output.js';
import { BIN, type ReleaseKind } from '../command-line.js';
import { EXIT_FAILED, EXIT_OK, UsageError } from '../exit-codes.js';
import type { CommandContext } from './context.js';
import { leaseJson, leaseSection } from './lease-report.js';
import { inspectionJson, nodeTable, summary } from './lock-report.js';
import { readName } from './read-name.js';

/** What the nodes have for the name, by kind. */
interface Found {
  readonly lock: JudgedLock;
  readonly 'read-write': ReadWriteInspection;
  readonly semaphore: SemaphoreInspection;
}

/** Every holding a node has an entry for: on a quorum or not. */
const holdings = (inspection: LeaseInspection) => [
  ...inspection.holders,
  ...inspection.uncertain,
  ...inspection.stale,
];

export async function release(context: CommandContext): Promise<number> {
  const { engine, request, term } = context;
  const resource = request.target!;
  const { lock, readWrite, semaphore: sem } = await readName(engine, resource);
  const found: Found = { lock, 'read-write': readWrite, semaphore: sem };
  const held: ReleaseKind[] = [];
  if (lock.keyed > 0) held.push('lock');
  if (holdings(readWrite).length > 0) held.push('read-write');
  if (holdings(sem).length > 0) held.push('semaphore');
  let kind = request.releaseKind;
  if (kind === undefined) {
    if (held.length > 1) {
      throw new UsageError(
        `'${resource}' has a ${held.map((k) => (k === 'read-write' ? 'read-write lock' : k)).join(' and a ')}: ` +
          `say which to release, e.g. ${BIN} release '${resource}' --kind ${held[0]}`,
      );
    }
    kind = held[0] ?? (request.holder === undefined ? 'lock' : undefined);
  }
  if (kind === undefined || !held.includes(kind)) {
    const judged = kind === undefined || kind === 'lock' ? lock : found[kind];
    const total = engine.nodes.length;
    const silent = total - judged.answered;
    const state =
      kind === 'lock'
        ? 'is not locked'
        : `has no ${kind === undefined ? 'read-write lock or semaphore' : kind === 'read-write' ? 'read-write lock' : 'semaphore'} held`;
    term.note(
      `${BIN}: '${resource}' ${state} on any node that answered` +
        (silent > 0 ? ` (${silent} of ${plural(total, 'node')} did not)` : '') +
        `: nothing to release. '${BIN} list' shows the locked resources.`,
    );
    // A script reading --json gets its answer on stdout too, in the shape of a release.
    if (request.json) {
      const before =
        kind === undefined
          ? null
          : kind === 'lock'
            ? inspectionJson(engine, lock)
            : leaseJson(engine, found[kind]);
      term.print(
        JSON.stringify(
          {
            resource,
            kind: kind ?? null,
            holder: request.holder ?? null,
            released: false,
            deleted: 0,
            nodes: total,
            before,
          },
          null,
          2,
        ),
      );
    }
    return EXIT_FAILED;
  }
  return kind === 'lock' ? releaseLock(context, lock) : releaseLeases(context, found[kind]);
}

async function releaseLock(
  { engine, request, term, confirm }: CommandContext,
  before: JudgedLock,
): Promise<number> {
  const resource = request.target!;
  const total = engine.nodes.length;
  if (!request.json) {
    term.print(summary(engine, term, before));
    term.print();
    nodeTable(engine, term, before);
    term.print();
  }
  if (
    !(await agreed(
      request.yes,
      confirm,
      term,
      `Force-release '${resource}'? Its holder is not told; its fencing token keeps its late writes out. [y/N] `,
    ))
  ) {
    return EXIT_FAILED;
  }
  const deleted = await engine.forceRelease(resource);
  if (request.json) {
    term.print(
      JSON.stringify(
        {
          resource,
          kind: 'lock',
          // The value a quorum held (a lock's only holder), as the other kinds name the one released.
          holder: before.inspection.holder ?? null,
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
  return outcome({ engine, request, term }, deleted, before.answered);
}

async function releaseLeases(
  { engine, request, term, confirm }: CommandContext,
  before: ReadWriteInspection | SemaphoreInspection,
): Promise<number> {
  const resource = request.target!;
  const { holder } = request;
  const total = engine.nodes.length;
  const what = before.kind === 'read-write' ? 'read-write lock' : 'semaphore';
  if (holder !== undefined && !holdings(before).some((h) => h.value === holder)) {
    term.note(
      `${BIN}: no node that answered has a holder '${holder}' of the ${what} '${resource}': nothing to release. '${BIN} inspect ${resource}' shows its holders.`,
    );
    return EXIT_FAILED;
  }
  if (!request.json) {
    leaseSection(engine, term, before);
    term.print();
  }
  const whom = holder === undefined ? 'every holder of the' : `holder '${holder}' of the`;
  if (
    !(await agreed(
      request.yes,
      confirm,
      term,
      `Force-release ${whom} ${what} '${resource}'? Holders are not told; their fencing tokens keep their late writes out. [y/N] `,
    ))
  ) {
    return EXIT_FAILED;
  }
  // The primitives' own release, so that waiters are woken as by a holder's release; N does
  // not matter for releasing.
  const primitive =
    before.kind === 'read-write' ? readWriteLock(engine, resource) : semaphore(engine, resource, 1);
  const deleted = await primitive.forceRelease(holder);
  if (request.json) {
    term.print(
      JSON.stringify(
        {
          resource,
          kind: before.kind,
          holder: holder ?? null,
          released: deleted > 0,
          deleted,
          nodes: total,
          before: leaseJson(engine, before),
        },
        null,
        2,
      ),
    );
  } else if (deleted > 0) {
    term.print(
      `${term.paint('Released', 'good')} ${whom} ${what} '${resource}': deleted ${deleted} ${deleted === 1 ? 'entry' : 'entries'} on the nodes and woke its waiters.`,
    );
  }
  return outcome({ engine, request, term }, deleted, before.answered);
}

/** True once the release is agreed: --yes, or a yes on the terminal. */
async function agreed(
  yes: boolean,
  confirm: CommandContext['confirm'],
  term: CommandContext['term'],
  question: string,
): Promise<boolean> {
  if (yes || (await confirm(question))) return true;
  term.note('Not released.');
  return false;
}

/** The exit code once released: failed when nothing was left to delete or too few nodes answered. */
function outcome(
  { engine, request, term }: Pick<CommandContext, 'engine' | 'request' | 'term'>,
  deleted: number,
  answered: number,
): number {
  const total = engine.nodes.length;
  if (deleted === 0) {
    term.note(`${BIN}: no node had it any more: '${request.target!}' ended meanwhile.`);
    return EXIT_FAILED;
  }
  if (answered < engine.quorum) {
    term.note(
      term.paintErr(
        `Only ${answered} of ${plural(total, 'node')} answered; entries on the others expire with their lease.`,
        'bad',
      ),
    );
    return EXIT_FAILED;
  }
  return EXIT_OK;
}
