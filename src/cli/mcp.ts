/**
 * `tether mcp --url ws://… [--token-file F] [--cwd DIR] [--env K=V …] -- <command> [args…]`
 *
 * A local stdio MCP server that relays to a stdio MCP server running on a tether host, over
 * a session that survives link drops. Stdout carries protocol messages only; everything
 * else (usage errors, reconnect notices, the remote server's stderr) goes to stderr.
 */
import { readFile } from 'node:fs/promises';
import { ExecClient } from '../client/index.js';
import { runBridge, EXIT_SESSION_LOST } from '../mcp/bridge.js';
import type { EnvPolicy } from '../protocol/index.js';

const USAGE = `usage: tether mcp --url ws://HOST:PORT [options] -- <command> [args…]

Runs <command> on the tether server as a stdio MCP server and relays MCP messages between
it and this process's stdin/stdout, surviving network drops. Use it as the "command" of
any MCP host:  "command": "tether", "args": ["mcp", "--url", "ws://…", "--", "npx", "-y", "…"]

options:
  --url URL            tether (or Codex exec-server) WebSocket URL (or $TETHER_URL)
  --token-file FILE    file holding the bearer token (or $TETHER_TOKEN)
  --cwd DIR            remote working directory (default: the server's)
  --env NAME=VALUE     set a variable for the remote command (repeatable)
  --inherit-env MODE   what the remote command inherits from the server's environment:
                       core (default: HOME, PATH, USER…), all, none
  --recovery-deadline-ms N  how long to keep reconnecting before giving up (default 25000)
  -h, --help           this text

exit status: the remote command's own; 0 when stdin ends (the host closed us);
${EXIT_SESSION_LOST} when the session is lost for good; 2 for usage errors.`;

export class UsageError extends Error {
  override readonly name = 'UsageError';
}

export interface McpCliOptions {
  url: string;
  tokenFile?: string;
  cwd?: string;
  env: Record<string, string>;
  inheritEnv: 'core' | 'all' | 'none';
  recoveryDeadlineMs?: number;
  argv: string[];
}

export function parseMcpArgs(argv: string[], environment: NodeJS.ProcessEnv = process.env): McpCliOptions | 'help' {
  const sep = argv.indexOf('--');
  const flags = sep === -1 ? argv : argv.slice(0, sep);
  const command = sep === -1 ? [] : argv.slice(sep + 1);
  const out: Omit<McpCliOptions, 'url' | 'argv'> & { url?: string } = { env: {}, inheritEnv: 'core' };
  for (let i = 0; i < flags.length; i++) {
    const flag = flags[i]!;
    if (flag === '-h' || flag === '--help') return 'help';
    const eq = flag.indexOf('=');
    const name = flag.startsWith('--') && eq !== -1 ? flag.slice(0, eq) : flag;
    const value = (): string => {
      if (eq !== -1 && flag.startsWith('--')) return flag.slice(eq + 1);
      const v = flags[++i];
      if (v === undefined) throw new UsageError(`${name} needs a value`);
      return v;
    };
    switch (name) {
      case '--url':
        out.url = value();
        break;
      case '--token-file':
        out.tokenFile = value();
        break;
      case '--cwd':
        out.cwd = value();
        break;
      case '--env': {
        const kv = value();
        const at = kv.indexOf('=');
        if (at <= 0) throw new UsageError(`--env expects NAME=VALUE (got '${kv}')`);
        out.env[kv.slice(0, at)] = kv.slice(at + 1);
        break;
      }
      case '--inherit-env': {
        const mode = value();
        if (mode !== 'core' && mode !== 'all' && mode !== 'none') {
          throw new UsageError(`--inherit-env must be core, all or none (got '${mode}')`);
        }
        out.inheritEnv = mode;
        break;
      }
      case '--recovery-deadline-ms': {
        const n = Number(value());
        if (!Number.isInteger(n) || n <= 0) throw new UsageError('--recovery-deadline-ms must be a positive integer');
        out.recoveryDeadlineMs = n;
        break;
      }
      default:
        if (sep === -1 && !flag.startsWith('-')) {
          throw new UsageError(`put '--' before the remote command: tether mcp --url … -- ${flags.slice(i).join(' ')}`);
        }
        throw new UsageError(`unknown option ${flag}`);
    }
  }
  const url = out.url ?? environment.TETHER_URL;
  if (!url) throw new UsageError('--url is required (or set TETHER_URL)');
  if (!/^wss?:\/\//.test(url)) throw new UsageError(`--url must be a ws:// or wss:// URL (got '${url}')`);
  if (command.length === 0) throw new UsageError("no remote command: give it after '--'");
  return { ...out, url, argv: command };
}

export async function run(argv: string[]): Promise<void> {
  let options: McpCliOptions | 'help';
  try {
    options = parseMcpArgs(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`tether mcp: ${error.message}\n\n${USAGE}\n`);
    process.exitCode = 2;
    return;
  }
  if (options === 'help') {
    process.stderr.write(`${USAGE}\n`);
    return;
  }

  let token = process.env.TETHER_TOKEN || undefined;
  if (options.tokenFile) {
    try {
      token = (await readFile(options.tokenFile, 'utf8')).trim();
    } catch (error) {
      process.stderr.write(`tether mcp: cannot read --token-file ${options.tokenFile}: ${(error as Error).message}\n`);
      process.exitCode = 2;
      return;
    }
    if (!token) {
      process.stderr.write(`tether mcp: --token-file ${options.tokenFile} is empty\n`);
      process.exitCode = 2;
      return;
    }
  }

  let client: ExecClient;
  try {
    client = await ExecClient.connect(options.url, {
      token,
      clientName: 'tether-mcp',
      recoveryDeadlineMs: options.recoveryDeadlineMs,
    });
  } catch (error) {
    process.stderr.write(`tether mcp: cannot connect to ${options.url}: ${(error as Error).message}\n`);
    await exit(EXIT_SESSION_LOST);
    return;
  }

  const aborter = new AbortController();
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.once(sig, () => aborter.abort(sig));

  const envPolicy: EnvPolicy = {
    inherit: options.inheritEnv,
    ignoreDefaultExcludes: false,
    exclude: [],
    set: {},
    includeOnly: [],
  };
  const result = await runBridge({
    client,
    argv: options.argv,
    cwd: options.cwd,
    env: options.env,
    envPolicy,
    input: process.stdin,
    output: process.stdout,
    diagnostics: process.stderr,
    signal: aborter.signal,
  });
  await client.close().catch(() => {});
  await exit(result.exitCode);
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
