/**
 * The conventions every `tether` command follows (tested in test/cli/conventions.test.ts):
 * - `--help`/`-h` (and `tether help <command>`) print the usage on stdout and exit 0;
 * - a usage error prints one line naming the problem, then where to read more, on stderr,
 *   and exits 2: `tether exec: --url needs a value` / `run 'tether exec --help' for usage`;
 * - durations always carry their unit (units.ts).
 */
import { parseArgs } from 'node:util';

/** Bad command-line input: the message names the flag and the problem. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** Reports a usage error of `tether <command>` (or of `tether` itself) and sets exit status 2. */
export function reportUsageError(command: string | undefined, message: string): void {
  const who = command ? `tether ${command}` : 'tether';
  process.stderr.write(`${who}: ${message}\nrun '${who} --help' for usage\n`);
  process.exitCode = 2;
}

/** Help goes to stdout (so `tether exec --help | less` works) and is not an error. */
export function printHelp(text: string): void {
  process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
}

/**
 * Runs a command's argument parsing: a `UsageError` is reported the standard way (returns
 * undefined); anything else is a bug and propagates.
 */
export function parseOrReport<T>(command: string, parse: () => T): T | undefined {
  try {
    return parse();
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    reportUsageError(command, err.message);
    return undefined;
  }
}

type ParseArgsConfig = NonNullable<Parameters<typeof parseArgs>[0]>;

/**
 * `util.parseArgs` (strict) with its errors turned into one-line `UsageError`s that name the
 * flag: "unknown option '--bogus'", "--listen needs a value", "unexpected argument 'x'".
 */
export function parseFlags<T extends ParseArgsConfig>(config: T): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config); // strict unless the config says otherwise
  } catch (err) {
    const { code, message } = err as { code?: string; message: string };
    const quoted = /'([^']+)'/.exec(message)?.[1] ?? '';
    switch (code) {
      case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
        throw new UsageError(`unknown option '${quoted}'`);
      case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
        throw new UsageError(`unexpected argument '${quoted}'`);
      case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE': {
        const flag = /(--[\w-]+)/.exec(message)?.[1] ?? quoted;
        if (/argument missing/.test(message)) throw new UsageError(`${flag} needs a value`);
        if (/does not take an argument/.test(message)) throw new UsageError(`${flag} takes no value`);
        // `--session-ttl -5s`: parseArgs will not take a value starting with '-' (3 lines of advice).
        if (/ambiguous/.test(message)) throw new UsageError(`${flag}: a value starting with '-' must be written ${flag}=VALUE`);
        throw new UsageError(message);
      }
      default:
        throw new UsageError(message);
    }
  }
}
