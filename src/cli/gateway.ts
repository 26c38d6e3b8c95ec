/**
 * `tether gateway [--config] tether.json [--listen http://127.0.0.1:8766] [--stdio]`
 *
 * One MCP server in front of the configured ones. Over HTTP (default) the first stdout line
 * is the URL and nothing else is written to stdout; with --stdio, stdout carries only the MCP
 * protocol (HTTP is then served only if --listen is given). Logs go to stderr.
 * The config may be given without --config: MCP hosts that take their own --config (the
 * MCP Inspector) would otherwise swallow ours. SIGHUP or a change of the file reloads it.
 */
import { watch, readFileSync, type FSWatcher } from 'node:fs';
import path from 'node:path';
import { ConfigError, Gateway, loadConfigFile, serveGatewayStdio, startGatewayHttp, type GatewayHttp, type GatewayHttpOptions } from '../gateway/index.js';
import type { Logger } from '../supervisor/index.js';
import { atLeast } from '../util/logger.js';
import { parseCount, parseSize } from './units.js';
import { parseFlags, parseOrReport, printHelp, reportUsageError, UsageError } from './usage.js';

const HELP = `usage: tether gateway [options] CONFIG

One MCP server in front of the MCP servers in CONFIG, reconnecting and health-checking them.
Over HTTP (the default) the first stdout line is its URL; with --stdio, stdout is the MCP
protocol. Logs go to stderr.

  CONFIG               the mcpServers file, as MCP hosts write it (command/args/env/cwd, or
                       url/headers; "tether": {"url", "tokenFile"} on a stdio entry runs it on a
                       tether server). SIGHUP or a change of the file reloads it. Given as an
                       argument, not a flag: hosts that take a --config of their own (the MCP
                       Inspector) would swallow ours
  --listen URL         HTTP address (default http://127.0.0.1:8766; port 0 = any free port).
                       Serves the status page at /, MCP at /mcp, GET /mcp/servers[/:name],
                       POST /mcp/servers/:name/retry, POST /mcp/servers/retry-all, GET /events,
                       GET /healthz, GET /readyz
  --token-file FILE    require this token on the HTTP endpoints (Authorization: Bearer, or the
                       status page's cookie); /healthz and /readyz stay open
  --allow-origin ORIGIN  a browser origin (besides the gateway's own) allowed to call it;
                       repeatable
  --stdio              serve MCP on stdin/stdout (HTTP only if --listen is also given)
  --max-requests N     HTTP requests in flight at once from all clients, both MCP eras (256);
                       one client (a 2025 session, a 2026 address) holds at most a quarter
                       of it, one network (all of loopback; an IPv6 /64) at most half
  --max-request-memory SIZE  what those requests may hold, weighed before they are parsed
                       (256MiB); a client at most a quarter, a network at most half; a
                       request heavier than a client's share is refused (413)
  --verbose            debug logs (each server's stderr, every attempt) on stderr
  -h, --help           this text

  --config FILE is still accepted for CONFIG.
`;

export async function run(argv: string[]): Promise<void> {
  // No short flags: -v, -c and -l mean other things to other tools (version, the MCP
  // Inspector's --config), and hosts pass their own flags along.
  const parsed = parseOrReport('gateway', () =>
    parseFlags({
      args: argv,
      options: {
        config: { type: 'string' },
        listen: { type: 'string' },
        'token-file': { type: 'string' },
        'allow-origin': { type: 'string', multiple: true },
        stdio: { type: 'boolean', default: false },
        'max-requests': { type: 'string' },
        'max-request-memory': { type: 'string' },
        verbose: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
      allowPositionals: true,
    }),
  );
  if (!parsed) return;
  const { values, positionals } = parsed;
  if (values.help) {
    printHelp(HELP);
    return;
  }
  if (values.config && positionals.length > 0) return fail('give the config once (--config FILE or FILE), not both');
  if (positionals.length > 1) return fail(`unexpected arguments: ${positionals.slice(1).join(' ')} (one CONFIG file)`);
  const configFile = values.config ?? positionals[0];
  if (!configFile) return fail('no CONFIG file given (tether gateway [options] CONFIG)');
  let token: string | undefined;
  if (values['token-file']) {
    try {
      token = readFileSync(values['token-file'], 'utf8').trim();
    } catch (err) {
      return fail(`cannot read --token-file ${values['token-file']}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    if (!token) return fail(`--token-file ${values['token-file']} is empty`);
  }

  let limits: Pick<GatewayHttpOptions, 'maxRequests' | 'maxRequestsPerClient' | 'maxRequestMemory' | 'maxRequestMemoryPerClient'> = {};
  try {
    if (values['max-requests'] !== undefined) {
      const n = parseCount('--max-requests', values['max-requests']);
      limits = { ...limits, maxRequests: n, maxRequestsPerClient: Math.max(1, Math.floor(n / 4)) };
    }
    if (values['max-request-memory'] !== undefined) {
      const bytes = parseSize('--max-request-memory', values['max-request-memory']);
      limits = { ...limits, maxRequestMemory: bytes, maxRequestMemoryPerClient: Math.floor(bytes / 4) };
    }
  } catch (err) {
    if (err instanceof UsageError) return fail(err.message);
    throw err;
  }
  const logger = stderrLogger(values.verbose ? 'debug' : 'info');
  let listen: { host: string; port: number } | undefined;
  if (!values.stdio || values.listen) {
    try {
      listen = parseListen(values.listen ?? 'http://127.0.0.1:8766');
    } catch (err) {
      return fail((err as Error).message);
    }
  }

  let config;
  try {
    config = loadConfigFile(configFile);
  } catch (err) {
    return fail(err instanceof ConfigError ? err.message : String(err));
  }
  for (const w of config.warnings) logger('warn', w);
  if (config.disabled.length) logger('info', `disabled: ${config.disabled.join(', ')}`);
  if (config.servers.length === 0) logger('warn', 'no MCP servers configured: the gateway offers only its management tools');

  const gateway = new Gateway(config, { logger });
  gateway.on('event', (e) => logger('debug', `event ${e.event} ${JSON.stringify(e.data)}`));

  let http: GatewayHttp | undefined;
  if (listen) {
    try {
      http = await startGatewayHttp(gateway, { ...listen, ...limits, logger, token, allowedOrigins: values['allow-origin'] });
    } catch (err) {
      return fail(`cannot listen on ${listen.host}:${listen.port}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    if (!values.stdio) process.stdout.write(`${http.url}\n`);
    logger('info', `listening on ${http.url} (MCP at ${http.url}/mcp, status page at ${http.url}/)`);
    if (token) logger('info', `token required; open the status page once as ${http.url}/?token=… (traded for a cookie)`);
    else if (!isLoopback(listen.host)) logger('warn', `${listen.host} is not a loopback address and no --token-file is given: anyone who can reach it can use the endpoints`);
  }

  // Reload: SIGHUP, or the file changed (debounced: editors write in several steps). A bad
  // new config is reported and the running one kept.
  let reloading: Promise<void> = Promise.resolve();
  let lastText = safeRead(configFile);
  const reload = (why: string) => {
    reloading = reloading.then(async () => {
      const text = safeRead(configFile);
      if (why === 'file changed' && text === lastText) return;
      lastText = text;
      let next;
      try {
        next = loadConfigFile(configFile);
      } catch (err) {
        logger('error', `reload (${why}) failed, keeping the running config: ${err instanceof ConfigError ? err.message : String(err)}`);
        return;
      }
      for (const w of next.warnings) logger('warn', w);
      const { added, removed, changed } = await gateway.reconfigure(next);
      if (!added.length && !removed.length && !changed.length) logger('info', `reload (${why}): no server changed`);
    }).catch((err: unknown) => logger('error', `reload (${why}) failed: ${(err as Error)?.message ?? String(err)}`));
  };
  process.on('SIGHUP', () => reload('SIGHUP'));
  let watcher: FSWatcher | undefined;
  let debounce: NodeJS.Timeout | undefined;
  try {
    // The directory, not the file: editors and `mv` replace the file (a new inode).
    const dirName = path.dirname(path.resolve(configFile));
    const base = path.basename(configFile);
    watcher = watch(dirName, (_event, name) => {
      if (name !== null && name !== base) return;
      clearTimeout(debounce);
      debounce = setTimeout(() => reload('file changed'), 200);
    });
    watcher.on('error', () => {});
  } catch {
    logger('warn', `cannot watch ${configFile}: reload with SIGHUP`);
  }

  let shuttingDown = false;
  const shutdown = async (why: string) => {
    if (shuttingDown) return;
    shuttingDown = true;
    logger('info', `shutting down (${why})`);
    watcher?.close();
    clearTimeout(debounce);
    const started = Date.now();
    await http?.close().catch(() => {});
    await gateway.close();
    logger('info', `stopped in ${Date.now() - started} ms`);
    process.exit(0);
  };
  process.once('SIGINT', () => void shutdown('SIGINT'));
  process.once('SIGTERM', () => void shutdown('SIGTERM'));

  if (values.stdio) {
    // The host's first message picks the era (2025-11-25 or 2026-07-28): not awaited, so the
    // servers start connecting meanwhile.
    // While the host leaves more than a mark unread on stdout, stdin is not read.
    const onHold = (held: boolean, unread: number) =>
      logger('debug', held ? `stdout: ${unread} bytes not read by the host: stdin paused` : 'stdout drained: reading stdin again');
    serveGatewayStdio(gateway, { onClose: () => void shutdown('stdin closed'), onHold }).then(
      (era) => logger('debug', `stdio host: ${era === 'modern' ? '2026-07-28' : '2025'} era`),
      (err: unknown) => logger('error', `stdio: ${(err as Error).message}`),
    );
  }
  await gateway.start();
  const summary = gateway.summaries().map((s) => `${s.name}=${s.status}`).join(' ');
  if (summary) logger('info', `servers: ${summary}`);
}

function parseListen(text: string): { host: string; port: number } {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new Error(`--listen must be a URL like http://127.0.0.1:8766 (got ${JSON.stringify(text)})`);
  }
  if (url.protocol !== 'http:') throw new Error(`--listen must be an http:// URL (got ${url.protocol})`);
  if (url.pathname !== '/' && url.pathname !== '') throw new Error('--listen takes no path: MCP is served at /mcp');
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const port = url.port === '' ? 80 : Number(url.port);
  return { host, port };
}

function safeRead(file: string): string | null {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return null;
  }
}

function isLoopback(host: string): boolean {
  return host === '127.0.0.1' || host === 'localhost' || host === '::1';
}

function stderrLogger(min: 'debug' | 'info'): Logger {
  return atLeast(min, (level, msg) => process.stderr.write(`${new Date().toISOString()} ${level.padEnd(5)} gateway: ${msg}\n`));
}

function fail(message: string): void {
  reportUsageError('gateway', message);
}
