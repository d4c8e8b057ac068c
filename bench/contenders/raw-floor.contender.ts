import { randomUUID } from 'node:crypto';
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

const isOk = (reply: unknown) => reply === 'OK';
const isAnswer = () => true;

/**
 * The floor: the bare commands of one lock cycle and no library. `SET key
 * value NX PX ttl` on every node in parallel, then the compare-and-delete
 * EVALSHA on every node; on several nodes each round settles once a majority
 * has answered, as a Redlock cycle must (no validity arithmetic, no timer,
 * no retry, no cleanup of partial grants).
 */
export function rawFloorContender(autoPipelining: boolean): Contender {
  return {
    id: autoPipelining ? 'raw+ap' : 'raw',
    label: autoPipelining ? 'raw floor +AP' : 'raw floor',
    kind: 'floor',
    canWait: false,
    settings: `SET NX PX + EVALSHA compare-and-delete, all nodes in parallel, each round done at a majority of answers; clients ${autoPipelining ? 'with' : 'without'} enableAutoPipelining`,
    async open(urls: readonly string[], { ttl }: OpenOptions): Promise<ContenderSession> {
      const clients = await openClients(urls, { autoPipelining });
      const sha = String(await clients[0].script('LOAD', COMPARE_AND_DELETE));
      await Promise.all(
        clients.slice(1).map((client) => client.script('LOAD', COMPARE_AND_DELETE)),
      );
      const one = clients.length === 1 ? clients[0] : undefined;
      const session: ContenderSession<string> = one
        ? {
            acquire: async (key) => {
              const value = randomUUID();
              if ((await one.set(key, value, 'PX', ttl, 'NX')) !== 'OK') throw new Error('busy');
              return value;
            },
            release: (value, key) => one.evalsha(sha, 1, key, value),
            close: () => closeClients(clients),
          }
        : {
            acquire: async (key) => {
              const value = randomUUID();
              const granted = await majority(
                clients.map((client) => client.set(key, value, 'PX', ttl, 'NX')),
                isOk,
              );
              if (!granted) throw new Error('busy');
              return value;
            },
            release: (value, key) =>
              majority(
                clients.map((client) => client.evalsha(sha, 1, key, value)),
                isAnswer,
              ),
            close: () => closeClients(clients),
          };
      return session as ContenderSession;
    },
  };
}
