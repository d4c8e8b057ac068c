/** `health`: every node up or down with its latency, the quorum, and the set-up risks. */
import { collectRisks } from '../../engine/internal.js';
import { plural, type Column } from '../cli-output.js';
import { formatLatency, roundLatency } from '../durations.js';
import { EXIT_FAILED, EXIT_OK } from '../exit-codes.js';
import { READ_TIMEOUT_MS, type CommandContext } from './context.js';
import { nodeError } from './lock-report.js';

export async function health({ engine, request, term }: CommandContext): Promise<number> {
  const report = await engine.health();
  const risks = await collectRisks(
    engine.nodes,
    report.nodes.map((node) => node.up),
    engine.options,
    READ_TIMEOUT_MS,
  );
  const up = report.nodes.filter((n) => n.up).length;
  const nodes = report.nodes.map((node, i) => ({
    node: node.node,
    up: node.up,
    latency: node.latency === undefined ? null : roundLatency(node.latency),
    error: nodeError(engine, i, node.error) ?? null,
  }));
  if (request.json) {
    term.print(
      JSON.stringify(
        {
          quorum: report.quorum,
          required: report.required,
          up,
          nodes,
          risks,
        },
        null,
        2,
      ),
    );
  } else {
    const columns: Column[] = [
      { title: 'NODE' },
      { title: 'STATUS' },
      { title: 'LATENCY', align: 'right' },
    ];
    if (nodes.some((node) => node.error)) columns.push({ title: 'NOTE' });
    term.table(
      columns,
      nodes.map((node) => [
        node.node,
        node.up ? { text: 'up', tone: 'good' } : { text: 'down', tone: 'bad' },
        node.latency === null ? '-' : formatLatency(node.latency),
        node.error ? { text: node.error, tone: 'bad' } : '',
      ]),
    );
    term.print();
    term.print(
      report.quorum
        ? `${term.paint('Quorum reachable', 'good')}: ${up} of ${plural(report.nodes.length, 'node')} up, ${report.required} needed.`
        : `${term.paint('No quorum', 'bad')}: ${up} of ${plural(report.nodes.length, 'node')} up, ${report.required} needed; no lock can be granted.`,
    );
    if (risks.length > 0) {
      term.print();
      term.print(term.paint('Set-up risks:', 'warn'));
      for (const risk of risks) term.print(`  - ${risk}`);
    }
  }
  return report.quorum ? EXIT_OK : EXIT_FAILED;
}
