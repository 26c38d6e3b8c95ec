/**
 * `tether mcp --url ws://… [options] <command> [args…]`
 *
 * A local stdio MCP server that relays to a stdio MCP server running on a tether host, over
 * a session that survives link drops. Stdout carries protocol messages only; everything
 * else (usage errors, reconnect notices, the remote server's stderr) goes to stderr.
 * Connection, environment and cwd flags are those of `tether exec` (remote-options.ts).
 */
import type { ExecClient } from '../client/index.js';
import type { Logger } from '../util/logger.js';
import { runBridge, EXIT_SESSION_LOST, EXIT_START_FAILED } from '../mcp/bridge.js';
import { connectClient } from './connect.js';
import { keepShortfall } from './keep-notice.js';
import { catchEarlySignals } from './early-signals.js';
import { buildRemoteEnv, parseCommandLine, parseRemoteArgs, REMOTE_OPTIONS_HELP, type RemoteOptions } from './remote-options.js';
import { endStdio, flushed, SIGNAL_FLUSH_MS, stopOnSignals } from './stdio-stop.js';
import { UsageError } from './usage.js';

const USAGE = `usage: tether mcp [options] <command> [args…]

Runs <command> on a tether server as a stdio MCP server and relays MCP messages between it
and this process's stdin/stdout, surviving network drops. Options end at the first argument
that is not one: everything from <command> on is the remote server's (a '--' before it is
allowed, not needed). Use it as the command of any MCP host (with tether on its PATH):
  "command": "tether",
  "args": ["mcp", "--url", "ws://HOST:8765", "npx", "-y", "@modelcontextprotocol/server-everything"]
or, without installing: "command": "npx", "args": ["-y", "--package=/abs/path/tether-exec-X.tgz",
"tether", "mcp", …] (once published: "args": ["-y", "tether-exec", "mcp", …]).

options:
${REMOTE_OPTIONS_HELP.split('\n')
  .filter((line) => !/--tty/.test(line))
  .join('\n')}
  --name NAME               the session's name (1..64 of A-Z a-z 0-9 . _ -), unique among
                            the live sessions of your token: 'tether attach --watch NAME'
                            shows the remote server's stdout and stderr live, read-only
                            (this host stays the one writer; see docs/attach.md)
  -h, --help                this text

The remote command gets the server's core variables (PATH, HOME, USER, SHELL…)
and LANG/TERM from this side; --env and --inherit-env add to that.

DURATION: a number and its unit: 500ms, 25s, 2m.

exit status: the remote command's own; 0 when stdin ends (the host closed us);
${EXIT_START_FAILED} if it could not be started; ${EXIT_SESSION_LOST} if the server cannot be reached, the
session is lost for good, or another attachment took it (tether attach --take: nothing
more is relayed, the remote server runs on for the taker); 2 for usage errors.`;

const say = (line: string) => process.stderr.write(`tether mcp: ${line}\n`);
/** The stop's own notices (stdio-stop.ts), on stderr as the rest. */
const log: Logger = (_level, message) => say(message);
/**
 * Without a signal (stdin ended, the remote server exited, the session lost), how long a
 * host may take to read the last protocol messages before they are dropped: a host that
 * stopped reading must not keep the bridge alive for ever.
 */
const EXIT_FLUSH_MS = 30_000;

/**
 * The flags of `tether exec` (a bare `--env NAME` forwards a secret the MCP host put in our
 * environment), except `--tty`: a terminal would echo requests back and turn \n into \r\n,
 * corrupting the JSON-RPC stream.
 */
export function parseMcpArgs(argv: string[], environment: NodeJS.ProcessEnv = process.env): RemoteOptions | 'help' {
  const options = parseRemoteArgs(argv, environment, 'mcp');
  if (options !== 'help' && options.tty) {
    throw new UsageError('--tty cannot be used with mcp: a terminal echoes input and rewrites newlines, corrupting JSON-RPC');
  }
  return options;
}

export async function run(argv: string[]): Promise<void> {
  const parsed = await parseCommandLine('mcp', USAGE, () => parseMcpArgs(argv));
  if (!parsed) return;
  const { options, token, ca } = parsed;

  const early = catchEarlySignals();
  let client: ExecClient;
  try {
    client = await connectClient(options, { token, ca }, {
      clientName: 'tether-mcp',
      ...(options.name !== undefined ? { name: options.name } : {}),
      signal: early.signal,
      sessionKeepMs: options.keepMs,
      // Warnings only ("cannot reach …; retrying"): the rest has its own one-line notices.
      logger: (level, message) => {
        if (level === 'warn') say(message);
      },
    });
  } catch (error) {
    if (early.exitCode !== undefined) return exit(early.exitCode);
    say(`cannot connect to ${options.url}: ${(error as Error).message}`);
    return exit(EXIT_SESSION_LOST);
  }
  const shortfall = keepShortfall(client, options.keepMs);
  if (shortfall) say(shortfall);

  let remoteEnv;
  try {
    remoteEnv = buildRemoteEnv(await client.environmentInfo(), { ...options, tty: false });
  } catch (error) {
    early.release();
    await client.close().catch(() => {});
    if (early.exitCode !== undefined) return exit(early.exitCode);
    say(`cannot read the server's environment: ${(error as Error).message}`);
    return exit(EXIT_SESSION_LOST);
  }
  // From here on a signal stops the bridge, which stops the remote server first; the whole
  // stop, the flush of stdout included, is bounded (stdio-stop.ts) even when the host no
  // longer reads our stdout.
  early.release();
  const aborter = new AbortController();
  const signals = stopOnSignals({ log, stop: (signal) => aborter.abort(signal) });
  // The host went away without closing our stdin first (EPIPE): stop the remote server
  // now rather than crash and leave it to the session TTL.
  process.stdout.on('error', () => aborter.abort('SIGPIPE'));

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
  // Stopped by a signal, the host gets a short grace to read the last messages (the signal's
  // deadline still covers it); otherwise as long as EXIT_FLUSH_MS.
  return exit(result.exitCode, signals.signal ? SIGNAL_FLUSH_MS : EXIT_FLUSH_MS);
}

/**
 * Exit once stdout has been flushed: the last protocol message must reach a host that reads,
 * and local stdin (still open when the remote side ended first) must not keep us alive. A
 * host that does not read gets `withinMs`, then what it left unread is dropped (endStdio).
 */
async function exit(code: number, withinMs = SIGNAL_FLUSH_MS): Promise<void> {
  process.exitCode = code;
  await Promise.all([endStdio(process.stdout, withinMs, log), flushed(process.stderr, withinMs)]);
  process.exit(code);
}
