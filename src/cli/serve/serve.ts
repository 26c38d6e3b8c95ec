/**
 * `tether serve`: runs the exec-server. The bound URL is the first line of stdout (scripts
 * and tests read it); everything else goes to stderr.
 */
import { readFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import { join, resolve } from 'node:path';
import { Defaults, InsecureConfigError, startServer, type TetherServerOptions } from '../../server/index.js';
import { installLastResort } from '../../server/last-resort.js';
import { adminSocketPath, HandoverError, offerHandover, takeOver, type HandoverOffer, defaultStateDir, StateDirError } from '../../server/restart/index.js';
import { dieOf, STOP_SIGNALS } from '../die-of.js';
import type { ServeConfig } from './config.js';
import { serveOnStdio } from './serve-stdio.js';
import { isLogLevel, stderrLogger, type LogLevel } from '../../util/logger.js';
import { DURATION_SYNTAX, parseCount, parseDuration, parsePort, parseSize, SIZE_SYNTAX } from '../units.js';
import { parseFlags, parseOrReport, printHelp, UsageError } from '../usage.js';

export const SERVE_USAGE = `usage: tether serve [options]

Runs the tether exec-server (Codex exec-server compatible WebSocket JSON-RPC).
Prints the bound URL (ws://HOST:PORT, wss:// with TLS) as the first line of stdout; logs go to stderr.

options:
  --listen URL               ws://HOST:PORT to bind (default ws://127.0.0.1:8765; port 0 = any free port;
                             wss:// with --tls-cert/--tls-key), or stdio: one connection on
                             stdin/stdout, one JSON message a line, no token; it ends at EOF
                             on stdin, its processes killed, and the server exits 0
  --port PORT                the same as --listen ws://127.0.0.1:PORT
  --session-ttl DURATION     how long a detached session survives (default 30s)
  --max-session-ttl DURATION the longest a client may ask its session to survive a drop
                             (tether exec --keep; default 24h, at least --session-ttl)
  --state-dir DIR|none       where the server keeps what a successor needs to adopt its
                             sessions (keeper sockets, session records): a server that stops
                             or dies leaves its processes running, and a new tether serve on
                             the same DIR adopts them. Must be ours, mode 0700, not a symlink.
                             Default, per port: $XDG_STATE_HOME/tether/port-PORT, else
                             ~/.local/state/tether/port-PORT, else $XDG_RUNTIME_DIR/tether/
                             port-PORT, else /tmp/tether-UID/port-PORT; with port 0: none.
                             none: processes die with the server
  --adopt-within DURATION    with a state dir: how long processes outlive a server that
                             stopped or died, waiting for a successor to adopt them, before
                             they are killed (default 60s)
  --token-file FILE          require "Authorization: Bearer <token>" (token read from FILE,
                             or set TETHER_TOKEN). One token per line: each is its own
                             identity (a session belongs to the token that created it)
  --tls-cert FILE            serve wss:// with this certificate chain (PEM); needs --tls-key
  --tls-key FILE             the certificate's private key (PEM)
  --admin-token-file FILE    a token that may also list every session (tether ps);
                             others list only their own token's sessions
  --audit-argv               audit lines (one per process, at info) carry the whole argv,
                             not only argv[0]
  --output-window SIZE       unacknowledged output per process before the server stops
                             reading it (default 8MiB); with acks, throughput per process
                             is at most window / round-trip time (8 MiB over 100 ms: 80 MiB/s)
  --output-retention SIZE    acknowledged output kept per process for process/read (default 1MiB)
  --output-disk SIZE         with a state dir: output past the window goes to disk (DIR/spill)
                             instead of pausing the process, up to SIZE per session
                             (default 1GiB; 0: never, the process pauses at the window)
  --output-disk-total SIZE   what all sessions' output on disk may use, shared per token
                             (default: a quarter of the state dir's free space, at most 16GiB)
  --closed-retention DURATION  how long a closed process stays readable (default 30s)
  --allow-origin ORIGIN      accept WebSocket upgrades carrying this Origin (repeatable;
                             any other Origin gets 403)
  --allow-host NAME          on a loopback listener, accept this Host name besides
                             localhost, 127.0.0.0/8 and ::1 (repeatable; others get 403)
  --insecure-no-token        allow a non-loopback --listen address without a token
                             (refused otherwise: anyone reaching the port runs commands)
  --max-sessions N           sessions per server (default ${Defaults.maxSessions})
  --max-sessions-per-token N sessions one token may have at once (default ${Defaults.maxSessionsPerToken})
  --max-processes N          live processes per session (default ${Defaults.maxProcessesPerSession})
  --max-server-processes N   processes on the whole server at once (default: derived from the
                             descriptor limit, 4 per process, and the machine's process ids)
  --max-ptys N               tty processes on the whole server at once (default: kernel.pty.max
                             less kernel.pty.reserve, at most the process cap)
  --memory-budget SIZE       bytes clients and children can make the server hold (output not
                             yet read, queued input, send buffers, file data): from 90% the
                             sessions holding their fair share or more pause, and at 100% they
                             are refused new processes (default:
                             a quarter of RAM or of the cgroup's memory limit, at most 1GiB)
  --max-message-size SIZE    largest incoming message (default 16MiB)
  --max-connections N        open sockets at most; more are answered HTTP 503 (default: a
                             quarter of the descriptor limit, at most 10000)
  --stall-timeout DURATION   drop a connection whose unsent output has not moved this long
                             (a client that stopped reading; default 30s)
  --initialize-timeout DURATION  close a socket that has not sent its request headers, or
                             completed initialize, this long after it opened (default 5s)
  --max-read-file SIZE       largest file fs/readFile answers; larger ones are read in blocks
                             with fs/open + fs/readBlock (default 8MiB)
  --max-file-handles N       open fs handles per session (default 128)
  --fs-memory SIZE           file data all fs requests may hold at once (default 64MiB)
  --max-open-files N         fs handles open at once across all sessions (default: an eighth
                             of the descriptor limit, at most 4096)
  --replace                  take over from the server running on the same state dir: it
                             hands over its listening socket (no connection is refused
                             meanwhile) and stops; this one then listens on it
  --log-level LEVEL          debug | info | warn | error (default info)
  -h, --help                 show this help

SIGTERM, SIGINT, SIGHUP or SIGQUIT stop the server: every client is told first.
With a state dir, SIGTERM and SIGHUP (and SIGINT or SIGQUIT when stdin is not a
terminal) keep the sessions: clients are told "restarting" (WebSocket close 1012) and
every process runs on under its keeper for --adopt-within, for a new server on the same
state dir to adopt. Ctrl-C or Ctrl-\\ on an interactive terminal, or any of these
signals with --state-dir none, stop for good: clients are told "server stopped" (1001;
tether exec and mcp then exit at once) and every process is killed. A second signal
exits at once (killing every process, unless the stop keeps them).

${DURATION_SYNTAX}.
${SIZE_SYNTAX}.`;

/** The tokens in a token file: one a line, blank lines and surrounding spaces ignored. */
function readTokens(flag: string, file: string): [string, ...string[]] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new UsageError(`${flag}: cannot read '${file}': ${(err as Error).message}`);
  }
  const tokens = text.split('\n').map((line) => line.trim()).filter(Boolean);
  if (tokens.length === 0) throw new UsageError(`${flag}: '${file}' is empty`);
  if (tokens.some((t) => /\s/.test(t))) throw new UsageError(`${flag}: '${file}': a token cannot contain spaces`);
  return tokens as [string, ...string[]];
}

export function parseListen(text: string): { host: string; port: number } {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new UsageError(`--listen: invalid URL '${text}' (expected ws://HOST:PORT, e.g. ws://127.0.0.1:8765)`);
  }
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:') throw new UsageError(`--listen: only ws:// or wss:// (got '${url.protocol}//')`);
  if (url.pathname !== '/' && url.pathname !== '') throw new UsageError(`--listen: a path is not supported ('${url.pathname}')`);
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = url.port === '' ? Defaults.port : Number(url.port);
  return { host, port };
}

/** A PEM file's text; a UsageError naming the flag when it cannot be read or holds no `what`. */
function readPem(flag: string, file: string, what: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new UsageError(`${flag}: cannot read '${file}': ${(err as Error).message}`);
  }
  if (!new RegExp(`-----BEGIN [A-Z ]*${what}-----`).test(text)) throw new UsageError(`${flag}: '${file}' holds no PEM ${what.toLowerCase()}`);
  return text;
}

/**
 * `--state-dir`: an absolute path, null for `none`, or the per-user default for this port
 * (`<base>/port-<PORT>`: two servers of one user on two ports never share one, and a successor
 * on the same port finds it without a flag). Port 0 (a random port, which no successor can
 * take over) defaults to none.
 */
function parseStateDir(text: string | undefined, env: NodeJS.ProcessEnv, port: number): string | null {
  if (text === 'none') return null;
  if (text === '') throw new UsageError('--state-dir: expected a directory or none');
  if (text !== undefined) return resolve(text);
  if (port === 0) return null;
  let home = env.HOME;
  if (home === undefined) {
    try {
      home = userInfo().homedir;
    } catch {
      // no passwd entry: no home
    }
  }
  return join(defaultStateDir(env, process.geteuid?.() ?? 0, home), `port-${port}`);
}

/** Parses `tether serve` flags; throws `UsageError` with a message naming the flag. */
export function parseServeArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): ServeConfig {
  const parsed = parseFlags({
    args: argv,
    allowPositionals: false,
    options: {
      listen: { type: 'string' },
      port: { type: 'string' },
      'session-ttl': { type: 'string' },
      'max-session-ttl': { type: 'string' },
      'state-dir': { type: 'string' },
      'adopt-within': { type: 'string' },
      'token-file': { type: 'string' },
      'tls-cert': { type: 'string' },
      'tls-key': { type: 'string' },
      'admin-token-file': { type: 'string' },
      'audit-argv': { type: 'boolean' },
      'output-retention': { type: 'string' },
      'output-window': { type: 'string' },
      'output-disk': { type: 'string' },
      'output-disk-total': { type: 'string' },
      'closed-retention': { type: 'string' },
      'allow-origin': { type: 'string', multiple: true },
      'allow-host': { type: 'string', multiple: true },
      'insecure-no-token': { type: 'boolean' },
      'max-sessions': { type: 'string' },
      'max-sessions-per-token': { type: 'string' },
      'max-processes': { type: 'string' },
      'max-message-size': { type: 'string' },
      'max-server-processes': { type: 'string' },
      'max-ptys': { type: 'string' },
      'memory-budget': { type: 'string' },
      'max-connections': { type: 'string' },
      'stall-timeout': { type: 'string' },
      'initialize-timeout': { type: 'string' },
      'max-read-file': { type: 'string' },
      'max-file-handles': { type: 'string' },
      'fs-memory': { type: 'string' },
      'max-open-files': { type: 'string' },
      'log-level': { type: 'string' },
      replace: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const v = parsed.values;
  const options: TetherServerOptions = {};
  if (v.listen !== undefined && v.port !== undefined) throw new UsageError('give --listen or --port, not both');
  const stdio = v.listen === 'stdio' || v.listen === 'stdio://';
  if (stdio) {
    const tcpOnly = ['port', 'token-file', 'tls-cert', 'tls-key', 'allow-origin', 'allow-host', 'insecure-no-token', 'max-connections', 'state-dir', 'adopt-within'] as const;
    const given = tcpOnly.find((flag) => v[flag] !== undefined);
    if (given) throw new UsageError(`--${given} does not apply to --listen stdio (one connection on stdin/stdout, no token)`);
  } else if (v.listen !== undefined) Object.assign(options, parseListen(v.listen));
  if (v.port !== undefined) Object.assign(options, { host: Defaults.host, port: parsePort('--port', v.port) });
  if (v['session-ttl'] !== undefined) options.sessionTtlMs = parseDuration('--session-ttl', v['session-ttl']);
  if (v['max-session-ttl'] !== undefined) options.maxSessionTtlMs = parseDuration('--max-session-ttl', v['max-session-ttl']);
  if (!stdio) options.stateDir = parseStateDir(v['state-dir'], env, options.port ?? Defaults.port);
  if (v['adopt-within'] !== undefined) {
    if (options.stateDir === null) throw new UsageError('--adopt-within needs a state dir (not --state-dir none; on port 0 give --state-dir DIR)');
    options.adoptWithinMs = parseDuration('--adopt-within', v['adopt-within']);
  }
  if (v['closed-retention'] !== undefined) options.closedRetentionMs = parseDuration('--closed-retention', v['closed-retention']);
  if (v['output-retention'] !== undefined) options.outputRetentionBytes = parseSize('--output-retention', v['output-retention']);
  if (v['output-window'] !== undefined) options.outputWindowBytes = parseSize('--output-window', v['output-window']);
  // 0: no spill (the process pauses at the window, as without a state dir).
  if (v['output-disk'] !== undefined) options.outputDiskBytes = v['output-disk'] === '0' ? 0 : parseSize('--output-disk', v['output-disk']);
  if (v['output-disk-total'] !== undefined) options.outputDiskTotalBytes = parseSize('--output-disk-total', v['output-disk-total']);
  if (v['max-message-size'] !== undefined) options.maxMessageBytes = parseSize('--max-message-size', v['max-message-size']);
  if (v['max-sessions'] !== undefined) options.maxSessions = parseCount('--max-sessions', v['max-sessions']);
  if (v['max-sessions-per-token'] !== undefined) options.maxSessionsPerToken = parseCount('--max-sessions-per-token', v['max-sessions-per-token']);
  if (v['max-processes'] !== undefined) options.maxProcessesPerSession = parseCount('--max-processes', v['max-processes']);
  if (v['max-server-processes'] !== undefined) options.maxServerProcesses = parseCount('--max-server-processes', v['max-server-processes']);
  if (v['max-ptys'] !== undefined) options.maxPtys = parseCount('--max-ptys', v['max-ptys']);
  if (v['memory-budget'] !== undefined) options.memoryBudgetBytes = parseSize('--memory-budget', v['memory-budget']);
  if (v['max-connections'] !== undefined) options.maxConnections = parseCount('--max-connections', v['max-connections']);
  if (v['stall-timeout'] !== undefined) options.stallTimeoutMs = parseDuration('--stall-timeout', v['stall-timeout']);
  if (v['initialize-timeout'] !== undefined) options.initializeTimeoutMs = parseDuration('--initialize-timeout', v['initialize-timeout']);
  const fs: NonNullable<TetherServerOptions['fs']> = {};
  if (v['max-read-file'] !== undefined) fs.maxReadFileBytes = parseSize('--max-read-file', v['max-read-file']);
  if (v['max-file-handles'] !== undefined) fs.maxHandles = parseCount('--max-file-handles', v['max-file-handles']);
  if (v['fs-memory'] !== undefined) fs.memoryBytes = parseSize('--fs-memory', v['fs-memory']);
  if (v['max-open-files'] !== undefined) fs.maxOpenFiles = parseCount('--max-open-files', v['max-open-files']);
  if (Object.keys(fs).length > 0) options.fs = fs;
  if (v['allow-origin'] !== undefined) options.allowedOrigins = v['allow-origin'];
  if (v['allow-host'] !== undefined) options.allowedHosts = v['allow-host'];
  if (v['insecure-no-token']) options.insecureNoToken = true;
  if (v['token-file'] !== undefined) {
    const [token, ...more] = readTokens('--token-file', v['token-file']);
    options.token = token;
    if (more.length > 0) options.tokens = more;
  } else if (env.TETHER_TOKEN && !stdio) {
    options.token = env.TETHER_TOKEN.trim();
  }
  if (v.listen?.startsWith('wss:') && v['tls-cert'] === undefined) throw new UsageError('--listen wss://… needs --tls-cert and --tls-key');
  if ((v['tls-cert'] === undefined) !== (v['tls-key'] === undefined)) {
    throw new UsageError(v['tls-cert'] === undefined ? '--tls-key needs --tls-cert' : '--tls-cert needs --tls-key');
  }
  if (v['tls-cert'] !== undefined && v['tls-key'] !== undefined) {
    options.tls = { cert: readPem('--tls-cert', v['tls-cert'], 'CERTIFICATE'), key: readPem('--tls-key', v['tls-key'], 'PRIVATE KEY') };
  }
  if (v['admin-token-file'] !== undefined) {
    const admin = readTokens('--admin-token-file', v['admin-token-file']);
    if (admin.length > 1) throw new UsageError(`--admin-token-file: '${v['admin-token-file']}' holds more than one token`);
    options.adminToken = admin[0];
  }
  if (v['audit-argv']) options.auditArgv = true;
  const logLevel = (v['log-level'] ?? 'info') as LogLevel;
  if (!isLogLevel(logLevel)) {
    throw new UsageError(`--log-level: expected debug, info, warn or error, got '${v['log-level']}'`);
  }
  const stateDir = options.stateDir ?? null;
  const replace = v.replace ?? false;
  if (replace && stdio) throw new UsageError('--replace does not apply to --listen stdio');
  if (replace && stateDir === null) {
    throw new UsageError('--replace needs a state dir (the running server is found by its DIR/admin.sock): not with --state-dir none');
  }
  return { options, stdio, logLevel, help: v.help ?? false, stateDir, replace };
}

export async function run(argv: string[]): Promise<void> {
  const config = parseOrReport('serve', () => parseServeArgs(argv));
  if (!config) return;
  if (config.help) {
    printHelp(SERVE_USAGE);
    return;
  }
  // Children never see the server's credential, whatever envPolicy they ask for.
  delete process.env.TETHER_TOKEN;
  const logger = stderrLogger(config.logLevel);
  if (config.stdio) return serveOnStdio(config, logger);
  let server;
  try {
    // --replace: the running server's listening socket, once it has stopped (handover.ts).
    const listenFd = config.replace ? await takeOver(adminSocketPath(config.stateDir!)) : undefined;
    server = await startServer({ ...config.options, ...(listenFd !== undefined ? { listenFd } : {}), logger });
  } catch (err) {
    if (err instanceof InsecureConfigError) {
      process.stderr.write(`tether serve: ${err.message}\n`);
      process.exitCode = 2;
      return;
    }
    if (err instanceof HandoverError) {
      process.stderr.write(`tether serve: --replace: ${err.message}\n`);
      process.exitCode = 1;
      return;
    }
    // One line, and the exit: nothing of the start is left holding the process (the state
    // dir was released and whatever was adopted handed back: server-start.ts).
    const what = err instanceof StateDirError ? '' : 'cannot listen: ';
    process.stderr.write(`tether serve: ${what}${(err as Error).message.replace(/\s*\n\s*/g, ' ')}\n`);
    process.exitCode = 1;
    return;
  }
  // Children live in their own process groups: never leave them behind, even on a crash.
  process.on('exit', () => server.killAllChildrenSync());
  // Errors nobody handled: survive one broken stream, exit (children killed) on anything else.
  installLastResort({ log: logger, killChildren: () => server.killAllChildrenSync() });
  process.stdout.write(`${server.url}\n`);
  if (config.options.insecureNoToken && !config.options.token && !server.loopback) {
    logger('warn', `listening on ${config.options.host} WITHOUT a token (--insecure-no-token): anyone who can reach this port can run commands`);
  }
  logger('info', `tether serve listening on ${server.url}${config.options.token ? ' (bearer token required)' : ''}`);
  if (config.stateDir !== null) {
    const keptS = Math.round((config.options.adoptWithinMs ?? Defaults.adoptWithinMs) / 1000);
    logger('info', `state dir ${config.stateDir}: if this server is stopped (SIGTERM, SIGHUP, --replace) or dies, its processes run on for ${keptS} s for the next tether serve on it to adopt (--state-dir none: they die with it)`);
  }

  // Closing the terminal that runs us (SIGHUP) also takes our stderr away: a failed log
  // write must not turn a clean shutdown into a crash.
  process.stderr.on('error', () => {});
  let stopped: Promise<void> | undefined;
  let handover: HandoverOffer | null = null;
  await new Promise<void>((resolve) => {
    let stopping = false;
    let keep = false;
    /** Stops the server (and the handover offer) once; resolves when stopped. */
    const stop = (): Promise<void> =>
      (stopped ??= Promise.all([
        server.close({ keep }).catch((err: unknown) => logger('error', `shutdown: ${(err as Error).message}`)),
        handover?.close(),
      ]).then(() => resolve()));
    if (config.stateDir !== null) {
      // A replace keeps the sessions for the new server (a state dir is there).
      const source = { listeningFd: () => server.listeningFd, log: logger, stop: () => ((keep = true), stop()) };
      // Without it the server still serves; only a later --replace cannot find it.
      offerHandover(adminSocketPath(config.stateDir), source).then(
        (offer) => (stopped ? void offer.close() : (handover = offer)),
        (err: unknown) => logger('warn', `tether serve --replace will not find this server: ${(err as Error).message}`),
      );
    }
    const shutdown = (signal: NodeJS.Signals) => {
      if (stopping) {
        // Impatient (a second Ctrl-C): kill now, synchronously, rather than die with
        // Node's default action and leave the children behind (kept ones are left to their keepers).
        // Then die of the signal as the deadline does: process.exit would join the thread pool,
        // and a thread stuck in a system call (what made the user impatient) would hold it forever.
        logger('warn', `${signal} again: ${keep ? 'exiting now' : 'killing every child now'}`);
        server.killAllChildrenSync(!keep);
        dieOf(signal);
        return;
      }
      stopping = true;
      keep = keepsOn(signal, config.options.stateDir != null);
      logger(
        'info',
        keep
          ? `${signal}: shutting down; sessions and processes kept for ${server.keptForMs / 1000} s for a new server on the same state dir`
          : `${signal}: shutting down, killing every child process`,
      );
      // A stop that does not finish in time (a thread-pool thread stuck in a system call keeps
      // the loop alive, and process.exit would wait for that thread too): kill every child,
      // then die of the signal itself, which waits for nothing.
      setTimeout(() => {
        logger('error', `shutdown did not finish within ${SHUTDOWN_DEADLINE_MS / 1000} s: killing every child and exiting`);
        server.killAllChildrenSync(!keep);
        dieOf(signal);
      }, SHUTDOWN_DEADLINE_MS).unref();
      void stop();
    };
    // SIGHUP: the terminal was closed; SIGQUIT: Ctrl-\. Both mean "stop", as SIGTERM does.
    for (const signal of STOP_SIGNALS) process.on(signal, shutdown);
  });
}


/**
 * Whether a stop by `signal` keeps the sessions (restart adoption): only with a state dir; SIGTERM
 * and SIGHUP always, Ctrl-C and Ctrl-\ unless typed on an interactive terminal (stop for good).
 */
export function keepsOn(signal: NodeJS.Signals, stateDir: boolean, interactive = process.stdin.isTTY === true): boolean {
  if (!stateDir) return false;
  if (signal === 'SIGTERM' || signal === 'SIGHUP') return true;
  return !interactive;
}
/** How long a stop may take before the server exits anyway (its children killed first). */
export const SHUTDOWN_DEADLINE_MS = 10_000;
