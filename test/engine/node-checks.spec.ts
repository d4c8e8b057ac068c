import { afterAll, afterEach, beforeAll, describe, expect, it, jest } from '@jest/globals';
import {
  collectRisks,
  findRisks,
  LockConfigurationError,
  LockEngine,
  type LockEngineOptions,
  type LockNodeSpec,
  type NodeFacts,
} from '../../lib/engine/internal.js';
import { parseInfo } from '../../lib/engine/node-checks.js';
import { quietLogger } from '../support/quiet-logger.js';
import { RedisNodeProcess, startRedisNodes, stopRedisNodes } from '../../dev/redis/redis-nodes.js';
import { useRedisNodes } from '../support/use-redis-nodes.js';

/** Harness defaults: appendonly yes, appendfsync always, maxmemory-policy noeviction. */
const safe = useRedisNodes(3);
const label = (node: RedisNodeProcess) => `${node.host}:${node.port}`;
/** How the start-up warning names a node that refused the connection, with the reason. */
const refused = (node: RedisNodeProcess) => `${label(node)}: connect ECONNREFUSED ${label(node)}`;
/** A node that is down, as ioredis options. */
const unreachable = (node: RedisNodeProcess) => ({ host: node.host, port: node.port });

describe('connection checks on real nodes', () => {
  let noAof: RedisNodeProcess;
  let everysec: RedisNodeProcess;
  let lru: RedisNodeProcess;
  let master: RedisNodeProcess;
  let replica: RedisNodeProcess;
  /** Killed at start: their ports stay reserved but nothing listens. */
  let down: RedisNodeProcess[];
  const started: RedisNodeProcess[] = [];
  const engines: LockEngine[] = [];

  beforeAll(async () => {
    [[noAof], [everysec], [lru], [master], down] = await Promise.all([
      startRedisNodes(1, { appendonly: false }),
      startRedisNodes(1, { appendfsync: 'everysec' }),
      startRedisNodes(1, { extraArgs: ['--maxmemory-policy', 'allkeys-lru'] }),
      // Without the default 5 s pause before a diskless full sync.
      startRedisNodes(1, { extraArgs: ['--repl-diskless-sync-delay', '0'] }),
      startRedisNodes(2),
    ]);
    started.push(noAof, everysec, lru, master, ...down);
    replica = await RedisNodeProcess.start({
      extraArgs: ['--replicaof', master.host, String(master.port)],
    });
    started.push(replica);
    // WAIT returns once the replica has synced and acknowledged the write: the link is up.
    await master.cli('SET', 'replicated', '1');
    expect(await master.cli('WAIT', 1, 4000)).toBe('1');
    await Promise.all(down.map((n) => n.kill()));
  }, 30_000);

  afterEach(async () => {
    await Promise.all(engines.splice(0).map((e) => e.close()));
  });

  afterAll(() => stopRedisNodes(started));

  /** Connects an engine to `nodes` and returns what it warned about. */
  async function warningsFor(
    nodes: readonly (RedisNodeProcess | LockNodeSpec)[],
    options: Partial<LockEngineOptions> = {},
  ): Promise<string[]> {
    const logger = quietLogger();
    const engine = new LockEngine({
      nodes: nodes.map((n) => (n instanceof RedisNodeProcess ? n.url : n)),
      logger,
      ...options,
    });
    engines.push(engine);
    await engine.connect();
    return logger.warnings;
  }

  it('connects without a warning to one node or an odd number of well-configured nodes', async () => {
    expect(await warningsFor([safe.nodes[0]])).toEqual([]);
    expect(await warningsFor(safe.nodes)).toEqual([]);
    // And strict mode has nothing to refuse.
    expect(await warningsFor(safe.nodes, { strict: true })).toEqual([]);
  });

  it('warns that a node with appendonly off can grant a lock twice after a restart', async () => {
    const warnings = await warningsFor([safe.nodes[0], safe.nodes[1], noAof]);
    expect(warnings).toEqual([
      `node ${label(noAof)} has appendonly off: a restart empties it, so a lock that stood on it and on no more than a quorum can be granted to a second holder (fence counters it lost restart from the clock, so tokens keep rising). Set appendonly yes and appendfsync always.`,
    ]);
  });

  it('warns about persistence when fencing is off too, and about counters only when it is on', async () => {
    expect(await warningsFor([safe.nodes[0], noAof, everysec], { fencing: false })).toEqual([
      `node ${label(noAof)} has appendonly off: a restart empties it, so a lock that stood on it and on no more than a quorum can be granted to a second holder. Set appendonly yes and appendfsync always.`,
      `node ${label(everysec)} has appendfsync everysec: a crash can lose the last lock keys it granted. Set appendfsync always.`,
    ]);
    expect(
      await warningsFor([safe.nodes[0], safe.nodes[1], noAof], { fenceCounterTtl: 0 }),
    ).toEqual([
      `node ${label(noAof)} has appendonly off: a restart empties it, so a lock that stood on it and on no more than a quorum can be granted to a second holder and its fence counters (which restart from 1, so tokens can repeat until reseedFences() runs). Set appendonly yes and appendfsync always.`,
    ]);
  });

  it('warns that a node with appendfsync everysec can lose its last counter increments', async () => {
    const warnings = await warningsFor([safe.nodes[0], safe.nodes[1], everysec]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(`node ${label(everysec)} has appendfsync everysec`);
    expect(warnings[0]).toContain('Set appendfsync always');
  });

  it('warns that a node with maxmemory-policy allkeys-lru may evict lock keys', async () => {
    const warnings = await warningsFor([safe.nodes[0], safe.nodes[1], lru]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(`node ${label(lru)} has maxmemory-policy allkeys-lru`);
    expect(warnings[0]).toContain('(inactive while maxmemory is 0)');
    expect(warnings[0]).toContain('Set maxmemory-policy noeviction');
  });

  it('reports the same server listed twice by the same URL', async () => {
    const [a, b] = safe.nodes;
    const warnings = await warningsFor([a, a, b]);
    expect(warnings).toEqual([
      `nodes ${label(a)} and ${label(a)} are the same Redis server; list independent servers, each once.`,
    ]);
  });

  it('reports the same server listed as localhost and as 127.0.0.1', async () => {
    const [a, b] = safe.nodes;
    const warnings = await warningsFor([{ host: 'localhost', port: a.port }, a, b]);
    expect(warnings).toEqual([
      `nodes localhost:${a.port} and ${label(a)} are the same Redis server; list independent servers, each once.`,
    ]);
    expect(await warningsFor([`redis://localhost:${b.port}`, a, b])).toEqual([
      expect.stringContaining(
        `nodes localhost:${b.port} and ${label(b)} are the same Redis server`,
      ),
    ]);
  });

  it('warns that an even number of nodes tolerates no more failures than one node fewer', async () => {
    const warnings = await warningsFor(safe.nodes.slice(0, 2));
    expect(warnings).toEqual([
      '2 nodes tolerate no more failures than 1: a quorum needs 2. Use an odd number of nodes.',
    ]);
  });

  it('reports a replica as a replica, and its master as having one', async () => {
    const warnings = await warningsFor([master, replica, safe.nodes[0]]);
    expect(warnings).toHaveLength(2);
    expect(warnings).toContain(
      `node ${label(master)} has 1 replica(s): a failover to one can lose recent lock keys and fence counters. Use independent nodes without failover.`,
    );
    expect(warnings).toContain(
      `node ${label(replica)} is a replica (read-only); list the primary servers only.`,
    );
  });

  it('refuses to connect in strict mode with a LockConfigurationError naming every problem', async () => {
    const logger = quietLogger();
    const engine = new LockEngine({ nodes: [safe.nodes[0].url, noAof.url], strict: true, logger });
    engines.push(engine);
    const error = await engine.connect().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockConfigurationError);
    const { message } = error as Error;
    expect(message).toMatch(/^Refusing to start \(strict mode\): /);
    expect(message).toContain('Use an odd number of nodes.');
    expect(message).toContain(`node ${label(noAof)} has appendonly off`);
    expect(message).toContain('set strict: false to start with warnings');
    // Refused, not warned.
    expect(logger.warnings).toEqual([]);
  });

  it('warns about nodes unreachable at start-up, saying no lock can be granted without a quorum', async () => {
    const [one, two] = await Promise.all([
      warningsFor([safe.nodes[0], safe.nodes[1], unreachable(down[0])]),
      warningsFor([safe.nodes[0], unreachable(down[0]), unreachable(down[1])]),
    ]);
    expect(one).toEqual([`1 of 3 node(s) unreachable at start-up (${refused(down[0])}).`]);
    expect(two).toEqual([
      `2 of 3 node(s) unreachable at start-up (${refused(down[0])}; ${refused(down[1])}): ` +
        'fewer than the quorum of 2, so no lock can be granted until they return.',
    ]);
  });

  it('says what the seed answered when a server that is not a cluster is given as one', async () => {
    const warnings = await warningsFor([{ cluster: [safe.nodes[0].url] }], { checkNodes: false });
    expect(warnings).toEqual([
      expect.stringMatching(
        /^1 of 1 node\(s\) unreachable at start-up \(cluster .*: Failed to refresh slots cache\. \(.*cluster support disabled\)\)/,
      ),
    ]);
  });

  it('skips the configuration checks with checkNodes: false, but still reports unreachable nodes', async () => {
    const [risky, oneDown] = await Promise.all([
      warningsFor([safe.nodes[0], safe.nodes[0], noAof, lru], { checkNodes: false }),
      warningsFor([noAof, everysec, unreachable(down[0])], { checkNodes: false }),
    ]);
    expect(risky).toEqual([]);
    expect(oneDown).toEqual([`1 of 3 node(s) unreachable at start-up (${refused(down[0])}).`]);
  });

  describe('collected for an operator (collectRisks)', () => {
    /** An engine that checks nothing at connect, so that only collectRisks reads the nodes. */
    async function unchecked(nodes: readonly (RedisNodeProcess | string | LockNodeSpec)[]) {
      const engine = new LockEngine({
        nodes: nodes.map((n) => (n instanceof RedisNodeProcess ? n.url : n)),
        checkNodes: false,
        logger: quietLogger(),
      });
      engines.push(engine);
      await engine.connect();
      return engine;
    }

    it('reads the nodes that are up and finds what the start-up checks find', async () => {
      const engine = await unchecked([safe.nodes[0], noAof, unreachable(down[0])]);
      const up = (await engine.health()).nodes.map((node) => node.up);
      expect(up).toEqual([true, true, false]);
      expect(await collectRisks(engine.nodes, up, engine.options, 2500)).toEqual([
        `node ${label(noAof)} has appendonly off: a restart empties it, so a lock that stood on it and on no more than a quorum can be granted to a second holder (fence counters it lost restart from the clock, so tokens keep rising). Set appendonly yes and appendfsync always.`,
      ]);
      expect(
        await collectRisks(engine.nodes, up, { fencing: false, fenceCounterTtl: 0 }, 2500),
      ).toEqual([
        `node ${label(noAof)} has appendonly off: a restart empties it, so a lock that stood on it and on no more than a quorum can be granted to a second holder. Set appendonly yes and appendfsync always.`,
      ]);
    });

    it('names a node whose user may not read INFO, after the risks found on the others', async () => {
      const [a, b] = safe.nodes;
      await b.cli(
        'ACL',
        'SETUSER',
        'blind',
        'reset',
        'on',
        '>blind-pw',
        '~*',
        '&*',
        '+@all',
        '-info',
      );
      // ioredis tells the console (not the engine's logger) that it skips its ready check.
      const consoleWarn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
      try {
        const engine = await unchecked([a, `redis://blind:blind-pw@${b.host}:${b.port}`, lru]);
        const risks = await collectRisks(engine.nodes, [true, true, true], engine.options, 2500);
        expect(risks).toHaveLength(2);
        expect(risks[0]).toContain(`node ${label(lru)} has maxmemory-policy allkeys-lru`);
        expect(risks[1]).toMatch(
          new RegExp(
            `^could not check the set-up of node ${label(b)} \\(NOPERM.*\\); allow INFO and CONFIG GET to its user\\.$`,
          ),
        );
      } finally {
        consoleWarn.mockRestore();
        await b.cli('ACL', 'DELUSER', 'blind');
      }
    });

    it('gives up on a node that does not answer within the bound', async () => {
      const engine = await unchecked([safe.nodes[0], safe.nodes[1], everysec]);
      await everysec.pause();
      try {
        const start = performance.now();
        const risks = await collectRisks(engine.nodes, [true, true, true], engine.options, 300);
        expect(performance.now() - start).toBeLessThan(2000);
        expect(risks).toEqual([
          `could not check the set-up of node ${label(everysec)} (no answer within 300 ms); allow INFO and CONFIG GET to its user.`,
        ]);
      } finally {
        await everysec.resume();
      }
    });
  });
});

describe('findRisks', () => {
  const sound: NodeFacts = {
    runId: 'a',
    role: 'master',
    replicas: 0,
    aofEnabled: true,
    appendfsync: 'always',
    maxmemory: 0,
    maxmemoryPolicy: 'noeviction',
  };
  const labels = (count: number) => Array.from({ length: count }, (_, i) => `n${i}:6379`);
  const facts = (...overrides: Partial<NodeFacts>[]) =>
    overrides.map((o, i) => ({ ...sound, runId: `run-${i}`, ...o }));

  it('finds nothing in independent, durable, non-evicting primaries', () => {
    expect(findRisks(labels(1), facts({}), true)).toEqual([]);
    expect(findRisks(labels(5), facts({}, {}, {}, {}, {}), true)).toEqual([]);
  });

  it('says how large a quorum an even node count needs', () => {
    expect(findRisks(labels(4), facts({}, {}, {}, {}), true)).toEqual([
      '4 nodes tolerate no more failures than 3: a quorum needs 3. Use an odd number of nodes.',
    ]);
  });

  it('skips nodes that could not be read', () => {
    expect(findRisks(labels(3), [undefined, ...facts({}, {})], true)).toEqual([]);
  });

  it('leaves persistence alone where CONFIG is disabled (appendfsync unknown)', () => {
    expect(findRisks(labels(1), facts({ appendfsync: undefined }), true)).toEqual([]);
  });

  it('reports missing persistence with fencing off too: a restart loses lock keys', () => {
    expect(
      findRisks(labels(1), facts({ aofEnabled: false, appendfsync: 'everysec' }), false),
    ).toEqual([
      'node n0:6379 has appendonly off: a restart empties it, so a lock that stood on it and on no more than a quorum can be granted to a second holder. Set appendonly yes and appendfsync always.',
    ]);
  });

  it('omits the fence counters from the failover risk when fencing is off', () => {
    const [risk] = findRisks(labels(1), facts({ replicas: 2 }), false);
    expect(risk).toContain('has 2 replica(s)');
    expect(risk).not.toContain('fence counters');
  });

  it('calls an eviction policy inactive only while maxmemory is 0', () => {
    const [inactive] = findRisks(labels(1), facts({ maxmemoryPolicy: 'volatile-lru' }), true);
    expect(inactive).toContain('volatile-lru (inactive while maxmemory is 0)');
    const [active] = findRisks(
      labels(1),
      facts({ maxmemoryPolicy: 'volatile-lru', maxmemory: 1 << 20 }),
      true,
    );
    expect(active).toContain('has maxmemory-policy volatile-lru: under memory pressure');
  });

  it('reports a replica as read-only rather than as a master with replicas', () => {
    expect(findRisks(labels(1), facts({ role: 'slave', replicas: 1 }), true)).toEqual([
      'node n0:6379 is a replica (read-only); list the primary servers only.',
    ]);
  });
});

describe('parseInfo', () => {
  it('reads the field:value lines of INFO, skipping section headers and blank lines', () => {
    const info =
      '# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\nexecutable:/usr/bin/redis-server\r\n\r\n' +
      '# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=6380,state=online\r\n';
    const fields = parseInfo(info);
    expect(Object.fromEntries(fields)).toEqual({
      redis_version: '7.0.15',
      run_id: 'abc123',
      executable: '/usr/bin/redis-server',
      role: 'master',
      connected_slaves: '1',
      slave0: 'ip=127.0.0.1,port=6380,state=online',
    });
  });

  it('keeps colons inside a value', () => {
    expect(parseInfo('config_file:C:\\redis\\redis.conf\r\n').get('config_file')).toBe(
      'C:\\redis\\redis.conf',
    );
  });
});
