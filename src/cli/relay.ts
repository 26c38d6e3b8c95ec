/**
 * `tether relay --to URL`: an exec-server on this machine whose sessions are served by an
 * upstream one (tether or Codex) through tether's client, so any Codex-protocol client
 * survives a flaky link (docs/relay.md). The downstream URL is the first line of stdout, as
 * with `serve`; everything else goes to stderr.
 */
import { InsecureConfigError } from '../server/index.js';
import { Defaults } from '../server/options.js';
import { isLoopbackName } from '../util/loopback.js';
import { isLogLevel, stderrLogger, type Logger, type LogLevel } from '../util/logger.js';
import type { RemoteBackendOptions } from '../relay/remote-backend.js';
import { connectionOptionsHelp, parseLeadingOptions, readCa, readToken, type ConnectionOptions } from './remote-options.js';
import { defaultRelayTokenFile, relayToken } from './relay-token.js';
import { parseListen } from './serve/serve.js';
import { endStdio, SIGNAL_FLUSH_MS, stopOnSignals } from './stdio-stop.js';
import { printHelp, reportUsageError, UsageError } from './usage.js';

const USAGE = `usage: tether relay --to ws://HOST:PORT [options]

Runs an exec-server on this machine (Codex protocol, byte for byte) whose every session is
served by a session on the upstream exec-server (tether or Codex), held through drops by
tether's client: calls in flight at a cut are answered once, output arrives whole.
Prints the listen URL as the first line of stdout; logs go to stderr.

upstream:
  --to URL                  the upstream exec-server (ws:// or wss://)
${connectionOptionsHelp('5m')
  .split('\n')
  .filter((line, i, all) => !line.startsWith('  --url') && !(i > 0 && all[i - 1]!.startsWith('  --url')))
  .join('\n')}

downstream:
  --listen URL|stdio        ws://127.0.0.1:PORT to listen on (default ws://127.0.0.1:0: a free
                            port), or stdio (one client on stdin/stdout)
  --listen-token-file FILE  the token downstream clients must send (read from FILE, or
                            generated and written there, mode 0600; default
                            ~/.tether/relay.token)
  --insecure-no-token       no downstream token (loopback only; for clients that cannot send one)
  --log-level LEVEL         debug | info | warn | error (default info)
  -h, --help                this text`;

/** Recovery deadline upstream when none is given: long, a relay is for flaky links. */
const DEFAULT_DEADLINE_MS = 5 * 60 * 1000;

export interface RelayConfig {
  upstream: ConnectionOptions;
  listen: { host: string; port: number } | 'stdio';
  listenTokenFile?: string;
  insecureNoToken: boolean;
  logLevel: LogLevel;
}

export function parseRelayArgs(argv: string[], environment: NodeJS.ProcessEnv = process.env): RelayConfig | 'help' {
  let to: string | undefined;
  let listen = { host: '127.0.0.1', port: 0 } as RelayConfig['listen'];
  let listenTokenFile: string | undefined;
  let insecureNoToken = false;
  let logLevel: string = 'info';
  const parsed = parseLeadingOptions(argv, environment, (name, value) => {
    switch (name) {
      case '--to':
        to = value();
        return true;
      case '--listen': {
        const text = value();
        if (text.startsWith('wss:')) throw new UsageError('--listen: the relay listens on ws:// (loopback) or stdio, not wss://');
        listen = text === 'stdio' || text === 'stdio://' ? 'stdio' : parseListen(text);
        return true;
      }
      case '--listen-token-file':
        listenTokenFile = value();
        return true;
      case '--insecure-no-token':
        insecureNoToken = true;
        return true;
      case '--log-level':
        logLevel = value();
        return true;
      default:
        return false;
    }
  });
  if (parsed === 'help') return 'help';
  if (argv.some((a) => a === '--url' || a.startsWith('--url='))) throw new UsageError('the upstream is --to URL (--url is for client commands)');
  if (parsed.operands.length > 0) throw new UsageError(`unexpected argument '${parsed.operands[0]}'`);
  if (to === undefined) throw new UsageError('--to URL is required (the upstream exec-server, ws://HOST:PORT)');
  if (!/^wss?:\/\/[^/]/.test(to)) throw new UsageError(`--to must be a ws:// or wss:// URL (got '${to}')`);
  if (!isLogLevel(logLevel)) throw new UsageError(`--log-level: expected debug, info, warn or error, got '${logLevel}'`);
  if (listen === 'stdio' && (insecureNoToken || listenTokenFile !== undefined)) {
    throw new UsageError(`--${insecureNoToken ? 'insecure-no-token' : 'listen-token-file'} does not apply to --listen stdio (one connection on stdin/stdout, no token)`);
  }
  if (insecureNoToken && listenTokenFile !== undefined) throw new UsageError('give --listen-token-file or --insecure-no-token, not both');
  return { upstream: { ...parsed.connection, url: to }, listen, listenTokenFile, insecureNoToken, logLevel };
}

export async function run(argv: string[]): Promise<void> {
  let config: RelayConfig | 'help';
  let token: string | undefined;
  let ca: string | undefined;
  try {
    config = parseRelayArgs(argv);
    if (config !== 'help') {
      token = await readToken(config.upstream.tokenFile);
      ca = await readCa(config.upstream.caFile);
    }
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    reportUsageError('relay', err.message);
    return;
  }
  if (config === 'help') {
    printHelp(USAGE);
    return;
  }
  if (config.listen !== 'stdio' && config.insecureNoToken && !isLoopbackName(config.listen.host)) {
    // One line: refused, not a usage mistake to be explained.
    process.stderr.write(`tether relay: refusing --insecure-no-token on ${config.listen.host}: it is for a loopback listener only\n`);
    process.exitCode = 2;
    return;
  }
  // The upstream credential is ours; nothing downstream sees it.
  delete process.env.TETHER_TOKEN;
  const log = stderrLogger(config.logLevel);
  const upstream = {
    token,
    ca,
    recoveryDeadlineMs: config.upstream.recoveryDeadlineMs ?? DEFAULT_DEADLINE_MS,
    keepaliveTimeoutMs: config.upstream.keepaliveTimeoutMs,
    log: (message: string) => log('warn', message),
  };
  if (config.listen === 'stdio') return relayStdio(config.upstream.url, upstream, log);
  let downstreamToken: string | undefined;
  if (!config.insecureNoToken) {
    const file = config.listenTokenFile ?? defaultRelayTokenFile();
    try {
      const got = relayToken(file);
      downstreamToken = got.token;
      log('info', `downstream clients need the bearer token in ${file}${got.created ? ' (generated now)' : ''}`);
    } catch (err) {
      if (!(err instanceof UsageError)) throw err;
      reportUsageError('relay', err.message);
      return;
    }
  }
  const { startRelay } = await import('../relay/relay.js');
  log('info', `connecting to the upstream ${config.upstream.url}`);
  let relay;
  try {
    relay = await startRelay({
      to: config.upstream.url,
      upstream,
      server: {
        host: config.listen.host,
        port: config.listen.port,
        token: downstreamToken,
        insecureNoToken: config.insecureNoToken,
        logger: log,
      },
    });
  } catch (err) {
    const what = err instanceof InsecureConfigError ? '' : `cannot start (upstream ${config.upstream.url}): `;
    process.stderr.write(`tether relay: ${what}${(err as Error).message}\n`);
    process.exitCode = 1;
    return;
  }
  process.stdout.write(`${relay.url}\n`);
  log('info', `tether relay listening on ${relay.url}, upstream ${config.upstream.url} (extensions: ${[...relay.backend.extensions].join(', ') || 'none'})`);
  process.stderr.on('error', () => {});
  await new Promise<void>((resolve) => {
    const shutdown = (signal: NodeJS.Signals) => {
      log('info', `${signal}: closing every upstream session`);
      void relay.close().finally(resolve);
    };
    process.once('SIGINT', shutdown);
    process.once('SIGTERM', shutdown);
    process.once('SIGHUP', shutdown);
  });
}

/**
 * `--listen stdio`: one client on stdin/stdout (a Codex `environments.toml` program), no
 * token (whoever holds the pipe started us). stdout carries protocol lines only. The end of
 * stdin closes the upstream session at once (its processes killed), then the relay exits 0.
 */
async function relayStdio(to: string, upstream: RemoteBackendOptions, log: Logger): Promise<void> {
  const { relayOnStdio } = await import('../relay/relay.js');
  log('info', `connecting to the upstream ${to}`);
  let relay;
  try {
    relay = await relayOnStdio({ to, upstream, server: { logger: log } }, process.stdin, process.stdout);
  } catch (err) {
    process.stderr.write(`tether relay: cannot start (upstream ${to}): ${(err as Error).message}\n`);
    process.exitCode = 1;
    return;
  }
  process.stderr.on('error', () => {});
  const signals = stopOnSignals({
    log,
    stop: (signal) => {
      log('info', `${signal}: closing the upstream session`);
      void relay.stop();
    },
  });
  log('info', `tether relay on stdio, upstream ${to} (one connection; it ends at the end of stdin)`);
  await relay.served;
  log('info', 'stdio connection ended: its upstream session was closed');
  // Stopped by a signal, the client's last lines get a short grace; at the end of stdin, as
  // long as the stall rule gives a reader.
  await endStdio(process.stdout, signals.signal ? SIGNAL_FLUSH_MS : Defaults.stallTimeoutMs, log);
  signals.release();
}
