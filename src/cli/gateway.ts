/**
 * `tether gateway --config tether.json [--listen http://127.0.0.1:8766] [--stdio]`
 *
 * One MCP server in front of the configured ones. Over HTTP (default) the first stdout line
 * is the URL and nothing else is written to stdout; with --stdio, stdout carries only the MCP
 * protocol (HTTP is then served only if --listen is given). Logs go to stderr.
 */
import { parseArgs } from 'node:util';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { ConfigError, Gateway, createGatewayServer, loadConfigFile, startGatewayHttp, type GatewayHttp } from '../gateway/index.js';
import type { Logger } from '../supervisor/index.js';
import { atLeast } from '../util/logger.js';

const HELP = `usage: tether gateway --config tether.json [--listen http://127.0.0.1:8766] [--stdio] [--verbose]

  --config FILE    mcpServers config (command/args/env/cwd, or url/headers; "tether": {"url",
                   "tokenFile"} on a stdio entry runs it on a tether server)
  --listen URL     HTTP address (default http://127.0.0.1:8766; port 0 = any free port).
                   Serves MCP at /mcp, GET /mcp/servers[/:name], POST /mcp/servers/:name/retry,
                   POST /mcp/servers/retry-all, GET /events (server-sent events)
  --stdio          serve MCP on stdin/stdout (HTTP only if --listen is also given)
  --verbose        debug logs (each server's stderr, every attempt) on stderr
`;

export async function run(argv: string[]): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        config: { type: 'string', short: 'c' },
        listen: { type: 'string', short: 'l' },
        stdio: { type: 'boolean', default: false },
        verbose: { type: 'boolean', short: 'v', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (err) {
    return fail(`${(err as Error).message}\n\n${HELP}`);
  }
  if (values.help) {
    process.stderr.write(HELP);
    return;
  }
  if (!values.config) return fail(`--config is required\n\n${HELP}`);

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
    config = loadConfigFile(values.config);
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
      http = await startGatewayHttp(gateway, { ...listen, logger });
    } catch (err) {
      return fail(`cannot listen on ${listen.host}:${listen.port}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    if (!values.stdio) process.stdout.write(`${http.url}\n`);
    logger('info', `listening on ${http.url} (MCP at ${http.url}/mcp)`);
    if (!isLoopback(listen.host)) logger('warn', `${listen.host} is not a loopback address: the endpoints have no authentication`);
  }

  let shuttingDown = false;
  const shutdown = async (why: string) => {
    if (shuttingDown) return;
    shuttingDown = true;
    logger('info', `shutting down (${why})`);
    await http?.close().catch(() => {});
    await gateway.close();
    process.exit(0);
  };
  process.once('SIGINT', () => void shutdown('SIGINT'));
  process.once('SIGTERM', () => void shutdown('SIGTERM'));

  if (values.stdio) {
    const server = createGatewayServer(gateway);
    const transport = new StdioServerTransport();
    transport.onclose = () => void shutdown('stdin closed');
    process.stdin.once('end', () => void shutdown('stdin closed'));
    await server.connect(transport);
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

function isLoopback(host: string): boolean {
  return host === '127.0.0.1' || host === 'localhost' || host === '::1';
}

function stderrLogger(min: 'debug' | 'info'): Logger {
  return atLeast(min, (level, msg) => process.stderr.write(`${new Date().toISOString()} ${level.padEnd(5)} gateway: ${msg}\n`));
}

function fail(message: string): void {
  process.stderr.write(`tether gateway: ${message}\n`);
  process.exitCode = 2;
}
