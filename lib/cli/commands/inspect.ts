/** `inspect <resource>`: holder, lease and fence counter of one lock on every node. */
import { judgeLock } from '../../engine/internal.js';
import { BIN } from '../command-line.js';
import { EXIT_FAILED, EXIT_OK } from '../exit-codes.js';
import type { CommandContext } from './context.js';
import { inspectionJson, nodeTable, summary } from './lock-report.js';

export async function inspect({ engine, request, term }: CommandContext): Promise<number> {
  const judged = judgeLock(await engine.inspect(request.target!), engine.quorum);
  if (request.json) {
    term.print(JSON.stringify(inspectionJson(engine, judged), null, 2));
  } else {
    term.print(summary(engine, term, judged));
    term.print();
    nodeTable(engine, term, judged);
    if (judged.verdict === 'free' && /[*?[]/.test(request.target!)) {
      term.note(
        `inspect takes one resource name, not a pattern; to search, run: ${BIN} list '${request.target}'`,
      );
    }
  }
  return judged.verdict === 'unknown' ? EXIT_FAILED : EXIT_OK;
}
