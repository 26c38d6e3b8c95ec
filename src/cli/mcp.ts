/**
 * `tether mcp --url ws://… [options] -- <command> [args…]`
 *
 * A local stdio MCP server that relays to a stdio MCP server running on a tether host, over
 * a session that survives link drops. Stdout carries protocol messages only; everything
 * else (usage errors, reconnect notices, the remote server's stderr) goes to stderr.
 * Connection, environment and cwd flags are those of `tether exec` (remote-options.ts).
 */
import { ExecClient } from '../client/index.js';
import { runBridge, EXIT_SESSION_LOST, EXIT_START_FAILED } from '../mcp/bridge.js';
import { buildRemoteEnv, parseRemoteArgs, readToken, REMOTE_OPTIONS_HELP, UsageError, type RemoteOptions } from './remote-options.js';

const USAGE = `usage: tether mcp --url ws://HOST:PORT [options] -- <command> [args…]

Runs <command> on a tether server as a stdio MCP server and relays MCP messages between it
and this process's stdin/stdout, surviving network drops. Use it as the "command" of any
MCP host:  "command": "tether", "args": ["mcp", "--url", "ws://…", "--", "npx", "-y", "…"]

options:
${REMOTE_OPTIONS_HELP.split('\n')
  .filter((line) => !/--tty/.test(line))
  .join('\n')}
  -e, --env NAME            forward NAME with its value here (e.g. a secret the MCP host
                            put in this process's environment); skipped when unset
  -h, --help                this text

The remote command gets the server's core variables (PATH, HOME, USER, SHELL…)
and LANG/TERM from this side; --env and --inherit-env add to that.

exit status: the remote command's own; 0 when stdin ends (the host closed us);
${EXIT_START_FAILED} if it could not be started; ${EXIT_SESSION_LOST} if the server cannot be reached or the
session is lost for good; 2 for usage errors.`;

const say = (line: string) => process.stderr.write(`tether mcp: ${line}\n`);

/**
 * Parses the flags. Beyond `tether exec`: `--env NAME` without a value forwards the local
 * value (as `docker run -e NAME` does), because MCP hosts hand secrets to the command
 * they start through its environment; `--tty` is refused (a terminal would echo requests
 * back and turn \n into \r\n, corrupting the JSON-RPC stream).
 */
export function parseMcpArgs(argv: string[], environment: NodeJS.ProcessEnv = process.env): RemoteOptions | 'help' {
  const sep = argv.indexOf('--');
  const flags = sep === -1 ? argv : argv.slice(0, sep);
  const expanded: string[] = [];
  for (let i = 0; i < flags.length; i++) {
    const flag = flags[i]!;
    if ((flag === '-e' || flag === '--env') && i + 1 < flags.length && !flags[i + 1]!.includes('=')) {
      const name = flags[++i]!;
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new UsageError(`${flag} expects NAME=VALUE or a variable NAME (got '${name}')`);
      const value = environment[name];
      if (value !== undefined) expanded.push('--env', `${name}=${value}`);
      continue;
    }
    expanded.push(flag);
  }
  const options = parseRemoteArgs(sep === -1 ? expanded : [...expanded, ...argv.slice(sep)], environment, 'mcp');
  if (options !== 'help' && options.tty) {
    throw new UsageError('--tty cannot be used with mcp: a terminal echoes input and rewrites newlines, corrupting JSON-RPC');
  }
  return options;
}

export async function run(argv: string[]): Promise<void> {
  let options: RemoteOptions | 'help';
  let token: string | undefined;
  try {
    options = parseMcpArgs(argv);
    if (options === 'help') {
      process.stderr.write(`${USAGE}\n`);
      return;
    }
    token = await readToken(options.tokenFile);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`tether mcp: ${error.message}\n\n${USAGE}\n`);
    process.exitCode = 2;
    return;
  }

  let client: ExecClient;
  try {
    client = await ExecClient.connect(options.url, {
      token,
      clientName: 'tether-mcp',
      recoveryDeadlineMs: options.recoveryDeadlineMs,
      keepaliveTimeoutMs: options.keepaliveTimeoutMs,
    });
  } catch (error) {
    say(`cannot connect to ${options.url}: ${(error as Error).message}`);
    return exit(EXIT_SESSION_LOST);
  }

  const aborter = new AbortController();
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.once(sig, () => aborter.abort(sig));
  // The host went away without closing our stdin first (EPIPE): stop the remote server
  // now rather than crash and leave it to the session TTL.
  process.stdout.on('error', () => aborter.abort('SIGPIPE'));

  let remoteEnv;
  try {
    remoteEnv = buildRemoteEnv(await client.environmentInfo(), { ...options, tty: false });
  } catch (error) {
    say(`cannot read the server's environment: ${(error as Error).message}`);
    await client.close().catch(() => {});
    return exit(EXIT_SESSION_LOST);
  }
  const result = await runBridge({
    client,
    argv: options.command,
    cwd: options.cwd,
    env: remoteEnv.env,
    envPolicy: remoteEnv.envPolicy,
    input: process.stdin,
    output: process.stdout,
    diagnostics: process.stderr,
    signal: aborter.signal,
  });
  await client.close().catch(() => {});
  return exit(result.exitCode);
}

/**
 * Exit once stdout has been flushed: the last protocol message must reach the host, and
 * local stdin (still open when the remote side ended first) must not keep us alive.
 */
async function exit(code: number): Promise<void> {
  await new Promise<void>((resolve) => process.stdout.write('', () => resolve()));
  await new Promise<void>((resolve) => process.stderr.write('', () => resolve()));
  process.exit(code);
}
