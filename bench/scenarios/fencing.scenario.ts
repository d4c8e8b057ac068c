import { OURS, OURS_NO_FENCING } from '../contenders/index.js';
import type { BenchContext } from '../support/bench-context.js';
import { formatMs } from '../../dev/text.js';
import { formatRate, formatRatio, pairedRatio } from '../support/format.js';
import { HEADLINES, type Headlines } from '../report/targets.js';
import type { ReportTable, Scenario, ScenarioResult } from './scenario.js';
import {
  FLOORS_KEY,
  measureUncontended,
  spread,
  type Floors,
  type UncontendedRow,
} from './uncontended.scenario.js';

export const fencingScenario: Scenario = {
  number: 3,
  id: 'fencing',
  title: 'Fencing tokens on vs off (our engine)',
  description:
    'The uncontended loop of scenario 1 (same rounds) with two engines per node count, interleaved: fencing on (the default: ' +
    'the acquire script also increments the node’s fence counter) and `fencing: false`.',
  defaultNodes: [1, 3, 5],
  async run(context: BenchContext): Promise<ScenarioResult> {
    const rows: { nodes: number; on: UncontendedRow; off: UncontendedRow }[] = [];
    for (const count of context.nodeCounts(this.defaultNodes)) {
      const [on, off] = await measureUncontended(context, [OURS, OURS_NO_FENCING], count);
      rows.push({ nodes: count, on, off });
    }
    const headlines = (context.shared.get(HEADLINES) ?? {}) as Headlines;
    headlines.fencing = rows.map(({ nodes, on, off }) => ({
      nodes,
      on: on.error ? undefined : on.rate,
      off: off.error ? undefined : off.rate,
      onCpu: on.error ? undefined : on.clientCpu + on.redisCpu,
      offCpu: off.error ? undefined : off.clientCpu + off.redisCpu,
      paired: on.error || off.error ? undefined : pairedRatio(on.rates, off.rates),
    }));
    context.shared.set(HEADLINES, headlines);
    const floors = context.shared.get(FLOORS_KEY) as Floors | undefined;
    const table: ReportTable = {
      title: 'Our engine, fencing on vs off',
      headers: [
        'nodes',
        'fencing',
        'cycles/s (best round)',
        'rounds min–max',
        'acquire p50',
        'acquire p99',
        'CPU µs/cycle: client',
        'redis',
        'on / off',
        '× raw floor',
        '× raw floor +AP',
      ],
      align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
      rows: rows.flatMap(({ nodes, on, off }) =>
        [
          ['on (default)', on],
          ['off', off],
        ].map(([name, row]) => {
          const r = row as UncontendedRow;
          const floor = floors?.get(nodes);
          if (r.error)
            return [
              String(nodes),
              name as string,
              `failed: ${r.error}`,
              '',
              '',
              '',
              '',
              '',
              '',
              '',
              '',
            ];
          return [
            String(nodes),
            name as string,
            formatRate(r.rate),
            spread(r.rates),
            formatMs(r.latency.p50),
            formatMs(r.latency.p99),
            r.clientCpu.toFixed(1),
            r.redisCpu.toFixed(1),
            row === on ? formatRatio(r.rate, off.error ? undefined : off.rate) : '',
            formatRatio(r.rate, floor?.raw),
            formatRatio(r.rate, floor?.rawAp),
          ];
        }),
      ),
      notes: [
        'Floors are those of scenario 1 in the same run ("–" when scenario 1 was not run).',
        "Fencing adds no round trip in the common case (all granting nodes return the same counter); inside the acquire script it adds an `INCR` of the node’s one counter (`fenceCounter: 'node'`, the default: no key per resource, whether the key is fresh, as here, or not).",
      ],
    };
    return {
      tables: [table],
      charts: [],
      data: rows.map(({ nodes, on, off }) => ({
        nodes,
        on: { ...on, contender: on.contender.id },
        off: { ...off, contender: off.contender.id },
      })),
    };
  },
};
