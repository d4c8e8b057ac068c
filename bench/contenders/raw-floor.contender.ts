import { randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { ACQUIRE, RELEASE } from '../../lib/engine/lua-scripts.js';
import {
  closeClients,
  openClients,
  type Contender,
  type ContenderSession,
  type OpenOptions,
} from './contender.js';

/** Compare-and-delete, the one script any safe release needs. KEYS: key. ARGV: value. */
const COMPARE_AND_DELETE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`;

/**
 * Settles as soon as a majority of the replies is in: true when a majority
 * said yes, false when a majority can no longer say yes. A failed command
 * counts as no.
 */
function majority(
  replies: readonly Promise<unknown>[],
  isYes: (reply: unknown) => boolean,
): Promise<boolean> {
  const needed = (replies.length >> 1) + 1;
  return new Promise((resolve) => {
    let yes = 0;
    let no = 0;
    const count = (ok: boolean) => {
      if (ok) yes++;
      else no++;
      if (yes === needed) resolve(true);
      else if (no === replies.length - needed + 1) resolve(false);
    };
    for (const reply of replies)
      reply.then(
        (r) => count(isYes(r)),
        () => count(false),
      );
  });
}

const isAnswer = () => true;

/** How a floor takes and frees a key on one node: the commands of one lock cycle, nothing else. */
interface FloorProtocol {
  /** Scripts loaded on every client before the first cycle. */
  readonly scripts: readonly string[];
  readonly settings: string;
  /** True when the node granted. `shas`: the loaded scripts' SHAs, in order. */
  acquire(
    client: Redis,
    shas: readonly string[],
    key: string,
    value: string,
    ttl: number,
  ): Promise<boolean>;
  release(client: Redis, shas: readonly string[], key: string, value: string): Promise<unknown>;
}

/** What the peers send: a bare `SET key value NX PX ttl`, then compare-and-delete. */
const BARE_SET: FloorProtocol = {
  scripts: [COMPARE_AND_DELETE],
  settings: 'SET NX PX + EVALSHA compare-and-delete',
  acquire: async (client, _shas, key, value, ttl) =>
    (await client.set(key, value, 'PX', ttl, 'NX')) === 'OK',
  release: (client, [compareAndDelete], key, value) =>
    client.evalsha(compareAndDelete, 1, key, value),
};

/** This process's name in the release messages of ENGINE_SCRIPTS (as an engine's sender). */
const SENDER = randomUUID().slice(0, 12);

/**
 * What our engine sends, without the engine: its ACQUIRE script (the node's
 * fence counter raised on a grant, the waiters' line checked first) with the
 * arguments of a first attempt, then its RELEASE script (a release message
 * when a line exists). Against BARE_SET it measures what the protocol costs;
 * against the engine, what the engine's own code does around it.
 */
const ENGINE_SCRIPTS: FloorProtocol = {
  scripts: [ACQUIRE.source, RELEASE.source],
  settings:
    'our engine’s ACQUIRE (fencing on, node counter) + RELEASE scripts by EVALSHA, with the arguments the engine sends, but no engine',
  acquire: async (client, [acquire], key, value, ttl) => {
    const seed = Date.now() * 1024;
    const reply = (await client.evalsha(
      acquire,
      2,
      key,
      'raw:{fence}',
      value,
      ttl,
      1,
      '1',
      seed,
      0,
    )) as number[];
    return reply[0] === 1;
  },
  release: (client, [, release], key, value) => client.evalsha(release, 1, key, value, '1', SENDER),
};

/**
 * A floor: the commands of one lock cycle and no library, on every node in
 * parallel; on several nodes each round settles once a majority has
 * answered, as a Redlock cycle must (no validity arithmetic, no timer, no
 * retry, no cleanup of partial grants). `engineScripts`: our engine's
 * scripts instead of the peers' bare `SET NX PX` (see ENGINE_SCRIPTS).
 */
export function rawFloorContender(autoPipelining: boolean, engineScripts = false): Contender {
  const protocol = engineScripts ? ENGINE_SCRIPTS : BARE_SET;
  const suffix = `${engineScripts ? ', our scripts' : ''}${autoPipelining ? ' +AP' : ''}`;
  return {
    id: `raw${engineScripts ? '-scripts' : ''}${autoPipelining ? '+ap' : ''}`,
    label: `raw floor${suffix}`,
    kind: 'floor',
    canWait: false,
    settings: `${protocol.settings}, all nodes in parallel, each round done at a majority of answers; clients ${autoPipelining ? 'with' : 'without'} enableAutoPipelining`,
    async open(urls: readonly string[], { ttl }: OpenOptions): Promise<ContenderSession> {
      const clients = await openClients(urls, { autoPipelining });
      const shas = await Promise.all(
        protocol.scripts.map((script) => clients[0].script('LOAD', script).then(String)),
      );
      await Promise.all(
        clients
          .slice(1)
          .flatMap((client) => protocol.scripts.map((script) => client.script('LOAD', script))),
      );
      const one = clients.length === 1 ? clients[0] : undefined;
      const session: ContenderSession<string> = one
        ? {
            acquire: async (key) => {
              const value = randomUUID();
              if (!(await protocol.acquire(one, shas, key, value, ttl))) throw new Error('busy');
              return value;
            },
            release: (value, key) => protocol.release(one, shas, key, value),
            close: () => closeClients(clients),
          }
        : {
            acquire: async (key) => {
              const value = randomUUID();
              const granted = await majority(
                clients.map((client) => protocol.acquire(client, shas, key, value, ttl)),
                Boolean,
              );
              if (!granted) throw new Error('busy');
              return value;
            },
            release: (value, key) =>
              majority(
                clients.map((client) => protocol.release(client, shas, key, value)),
                isAnswer,
              ),
            close: () => closeClients(clients),
          };
      return session as ContenderSession;
    },
  };
}
