/** The help of the tool and of each command, written from the tables in command-line.ts. */
import {
  BIN,
  COMMAND_NAMES,
  COMMAND_OPTIONS,
  COMMANDS,
  GLOBAL_OPTIONS,
  NODES_EXAMPLE,
  type CommandName,
  type OptionSpec,
} from './command-line.js';

function optionLines(options: Readonly<Record<string, OptionSpec>>, names: readonly string[]) {
  const rows = names.map((name) => {
    const spec = options[name];
    const flag = `${spec.short ? `-${spec.short}, ` : '    '}--${name}${spec.value ? ` ${spec.value}` : ''}`;
    return [flag, spec.help] as const;
  });
  const width = Math.max(...rows.map(([flag]) => flag.length));
  return rows.map(([flag, help]) => `  ${flag.padEnd(width)}  ${help}`).join('\n');
}

/** The help of the tool, or of one command. */
export function helpText(command: CommandName | undefined): string {
  const globals = optionLines(GLOBAL_OPTIONS, Object.keys(GLOBAL_OPTIONS));
  if (!command) {
    const width = Math.max(...COMMAND_NAMES.map((c) => `${c} ${COMMANDS[c].args}`.length));
    return `Inspect and administer the locks of nestjs-redis-lock on their Redis nodes.

Usage: ${BIN} <command> [arguments] [options]

Commands:
${COMMAND_NAMES.map((c) => `  ${`${c} ${COMMANDS[c].args}`.padEnd(width)}  ${COMMANDS[c].summary}`).join('\n')}

Options:
${globals}

Exit codes: 0 done, 1 failed (nodes unreachable, no quorum, nothing to
release), 2 usage error. Passwords in node URLs are never printed.

Examples:
  ${BIN} inspect order:42 --nodes redis://127.0.0.1:6379
  REDIS_LOCK_NODES=${NODES_EXAMPLE} ${BIN} list 'order:*'

Run '${BIN} <command> --help' for a command's details.`;
  }
  const spec = COMMANDS[command];
  const own = spec.options.length
    ? `\n\nOptions of ${command}:\n${optionLines(COMMAND_OPTIONS, spec.options)}`
    : '';
  return `${BIN} ${command}: ${spec.summary}.

Usage: ${BIN} ${command}${spec.args ? ` ${spec.args}` : ''} [options]

${spec.details}${own}

Options:
${globals}

Examples:
${spec.examples.map((example) => `  ${BIN} ${example}`).join('\n')}`;
}
