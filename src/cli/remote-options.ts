/**
 * Options shared by the commands that run something on a tether server (`tether exec`,
 * and meant for `tether mcp`): where to connect, how to authenticate, and the environment
 * and directory the remote command gets when the user says nothing.
 *
 * Default remote environment (what a user expects from a login-less remote run):
 * - `envPolicy {inherit: "core"}`: the server's own HOME, LOGNAME, PATH, SHELL, USER,
 *   USERNAME, TMPDIR/TEMP/TMP — never its secrets or the server's unrelated variables;
 * - PATH stays the server's own (inherited with the core names): it is the one that finds
 *   the server host's tools (node under nvm, `npx` for MCP servers), where a fixed
 *   "standard" PATH would hide them. `--env PATH=…` replaces it;
 * - laid over it: HOME = the server's `userHomeDir`, LANG = the local LANG (or C.UTF-8),
 *   TERM = the local TERM (or xterm-256color with --tty, dumb without);
 * - `--inherit-env` forwards the local environment on top (minus shell-session variables
 *   that make no sense elsewhere, and tether's own token); `--env K=V` wins over everything.
 * The working directory defaults to the server's (`environment/info` cwd).
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { EnvironmentInfo, EnvPolicy } from '../protocol/types.js';
import { invalidSessionName } from '../client/attach/attach-wire.js';
import { parseDuration, parseSize } from './units.js';
import { printHelp, reportUsageError, UsageError } from './usage.js';

/** Local variables never forwarded by --inherit-env: they describe this shell or this machine's tether. */
const NOT_FORWARDED = new Set(['PWD', 'OLDPWD', 'SHLVL', '_', 'TETHER_TOKEN', 'TETHER_URL']);

/** Where and how a command that talks to a tether server connects (exec, mcp, cp). */
export interface ConnectionOptions {
  url: string;
  tokenFile?: string;
  /** --ca FILE: the CA certificate(s) that sign a wss:// server's certificate. */
  caFile?: string;
  recoveryDeadlineMs?: number;
  keepaliveTimeoutMs?: number;
}

export interface RemoteOptions extends ConnectionOptions {
  tty: boolean;
  /** --env K=V, in order (later wins). */
  env: Record<string, string>;
  inheritEnv: boolean;
  cwd?: string;
  /** --keep DURATION: how long the server should keep the session after a drop (it grants at most its --max-session-ttl). */
  keepMs?: number;
  /** --keep-last SIZE: keep only the newest SIZE bytes unacknowledged; the server drops the oldest (told as a gap) instead of pausing. */
  keepLast?: number;
  /** --detach (tether exec): start the command, print where it runs, exit; the session stays for `tether attach`. */
  detach?: boolean;
  /** --name NAME (tether exec, tether mcp): the session's name, for `tether attach NAME` (a detached one, one whose client died, or `--watch`) and `tether ps`. */
  name?: string;
  /** The remote command: the first argument that is not an option, and all after it. */
  command: string[];
}

/** Where a client command connects without --url or $TETHER_URL: where `tether serve` listens by default. */
export const DEFAULT_URL = 'ws://127.0.0.1:8765';

/** The connection options' help lines; `deadline`: the command's default --recovery-deadline. */
export function connectionOptionsHelp(deadline = '25s'): string {
  return `  --url URL                 tether (or Codex exec-server) WebSocket URL (default $TETHER_URL,
                            else ${DEFAULT_URL}: where tether serve listens by default)
  --token-file FILE         file holding the bearer token (or $TETHER_TOKEN)
  --ca FILE                 for wss://: trust the CA certificate(s) in FILE (PEM), e.g.
                            the server's own self-signed certificate
  --recovery-deadline DURATION  keep reconnecting this long before giving up (default ${deadline})
  --keepalive-timeout DURATION  a ping unanswered this long means a dead link (default 10s)`;
}

export const REMOTE_OPTIONS_HELP = `${connectionOptionsHelp()}
  -t, --tty                 run the command on a pseudo-terminal (interactive programs)
  -e, --env NAME=VALUE      set a variable for the remote command (repeatable;
                            a bare NAME forwards its value from this side)
  --inherit-env             forward this shell's environment to the remote command
  --cwd DIR                 remote working directory (default: the server's)
  --keep DURATION           ask the server to keep the session this long after a drop
                            (a laptop asleep: 8h); it grants at most its --max-session-ttl
                            (default 24h), and says so. Default: its --session-ttl (30s)
  --keep-last SIZE          never pause the command for this client: past SIZE unread
                            bytes (or at the server's output disk quota) the server drops
                            the oldest output and each dropped range is said on stderr`;

/**
 * A command's own flags, beside the connection flags: called with the flag's name (`--x` of
 * `--x=v` too) and a function that takes its value; returns false for a flag it does not know.
 */
export type FlagHandler = (name: string, value: () => string) => boolean;

/**
 * Reads options from the front of `argv` until the first argument that is not one (or `--`),
 * as ssh, `docker run` and POSIX utilities do: the connection flags, then those `own` knows.
 * Everything from there on is returned untouched as the operands. Returns 'help' for
 * -h/--help; problems are `UsageError`s naming them.
 */
export function parseLeadingOptions(
  argv: string[],
  environment: NodeJS.ProcessEnv,
  own: FlagHandler,
  unknownHint = '',
): { connection: ConnectionOptions; operands: string[]; urls: string[] } | 'help' {
  const out: Omit<ConnectionOptions, 'url'> & { url?: string } = {};
  /** Every --url given, in order (the last one is `connection.url`; `tether ps` asks them all). */
  const urls: string[] = [];
  let i = 0;
  for (; i < argv.length; i++) {
    const flag = argv[i]!;
    if (flag === '--') {
      i++;
      break;
    }
    if (!flag.startsWith('-') || flag === '-') break; // the operands start here
    const eq = flag.startsWith('--') ? flag.indexOf('=') : -1;
    const name = eq === -1 ? flag : flag.slice(0, eq);
    let tookValue = false;
    const value = (): string => {
      tookValue = true;
      if (eq !== -1) return flag.slice(eq + 1);
      const v = argv[++i];
      if (v === undefined) throw new UsageError(`${name} needs a value`);
      return v;
    };
    switch (name) {
      case '-h':
      case '--help':
        if (eq !== -1) throw new UsageError(`${name} takes no value`);
        return 'help';
      case '--url':
        out.url = value();
        urls.push(out.url);
        break;
      case '--token-file':
        out.tokenFile = value();
        break;
      case '--ca':
        out.caFile = value();
        break;
      case '--recovery-deadline':
        out.recoveryDeadlineMs = parseDuration(name, value());
        break;
      case '--keepalive-timeout':
        out.keepaliveTimeoutMs = parseDuration(name, value());
        break;
      default:
        if (!own(name, value)) throw new UsageError(`unknown option '${name}'${unknownHint}`);
        // `--tty=yes`: a switch given a value is a mistake, not a yes.
        if (eq !== -1 && !tookValue) throw new UsageError(`${name} takes no value`);
    }
  }
  const url = out.url ?? (environment.TETHER_URL || DEFAULT_URL);
  for (const u of [url, ...urls]) if (!isWebSocketUrl(u)) throw new UsageError(`--url must be a ws:// or wss:// URL (got '${u}')`);
  return { connection: { ...out, url }, operands: argv.slice(i), urls };
}

/** A ws:// or wss:// URL with a host (a path is fine: a front door routes by it, docs/fleet.md). */
export function isWebSocketUrl(url: string): boolean {
  return /^wss?:\/\/[^/]/.test(url);
}

/**
 * Parses `[options] command args…` as ssh and `docker run` do: options end at the first
 * argument that is not one (or at `--`), and that argument and everything after it are the
 * remote command, untouched — its own options included (`tether exec --url U ls -la`). So
 * hosts that drop a `--` (the MCP Inspector) still launch `tether mcp` right. Returns 'help'
 * for -h/--help; problems are `UsageError`s naming them.
 */
export function parseRemoteArgs(argv: string[], environment: NodeJS.ProcessEnv = process.env, command = 'exec'): RemoteOptions | 'help' {
  const own: Pick<RemoteOptions, 'tty' | 'env' | 'inheritEnv' | 'cwd' | 'keepMs' | 'keepLast' | 'detach' | 'name'> = { tty: false, env: {}, inheritEnv: false };
  const parsed = parseLeadingOptions(
    argv,
    environment,
    (name, value) => {
      switch (name) {
        case '-t':
        case '--tty':
          own.tty = true;
          return true;
        case '-e':
        case '--env': {
          const kv = value();
          const at = kv.indexOf('=');
          if (at === -1 && /^[A-Za-z_][A-Za-z0-9_]*$/.test(kv)) {
            // `--env NAME` forwards this side's value (as `docker run -e NAME`); skipped when unset.
            const local = environment[kv];
            if (local !== undefined) own.env[kv] = local;
            return true;
          }
          if (at <= 0) throw new UsageError(`${name} expects NAME=VALUE or a variable NAME (got '${kv}')`);
          own.env[kv.slice(0, at)] = kv.slice(at + 1);
          return true;
        }
        case '--inherit-env':
          own.inheritEnv = true;
          return true;
        case '--keep':
          own.keepMs = parseDuration(name, value());
          return true;
        case '--keep-last':
          own.keepLast = parseSize(name, value());
          return true;
        case '--detach':
          if (command !== 'exec') return false;
          own.detach = true;
          return true;
        case '--name': {
          if (command !== 'exec' && command !== 'mcp') return false;
          own.name = value();
          const invalid = invalidSessionName(own.name);
          if (invalid) throw new UsageError(`--name ${invalid} (got '${own.name}')`);
          return true;
        }
        case '--cwd':
          own.cwd = value();
          if (own.cwd === '') throw new UsageError('--cwd needs a directory (got an empty one)');
          return true;
        default:
          return false;
      }
    },
    ' (the remote command starts at the first argument that is not an option)',
  );
  if (parsed === 'help') return 'help';
  const remote = parsed.operands;
  if (remote.length === 0) throw new UsageError(`no remote command given (tether ${command} --url ws://HOST:PORT <command> [args…])`);
  if (remote[0] === '') throw new UsageError("the remote command is empty ('')");
  return { ...parsed.connection, ...own, command: remote };
}

/** The PEM text of --ca FILE (undefined without the flag). */
export async function readCa(caFile: string | undefined): Promise<string | undefined> {
  if (caFile === undefined) return undefined;
  let text: string;
  try {
    text = await readFile(caFile, 'utf8');
  } catch (err) {
    throw new UsageError(`cannot read --ca ${caFile}: ${(err as Error).message}`);
  }
  if (!text.includes('-----BEGIN CERTIFICATE-----')) throw new UsageError(`--ca ${caFile} holds no PEM certificate`);
  return text;
}

/** The bearer token: --token-file (trimmed, must not be empty), else $TETHER_TOKEN, else none. */
export async function readToken(tokenFile: string | undefined, environment: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  if (tokenFile === undefined) return environment.TETHER_TOKEN || undefined;
  let text: string;
  try {
    text = await readFile(tokenFile, 'utf8');
  } catch (err) {
    throw new UsageError(`cannot read --token-file ${tokenFile}: ${(err as Error).message}`);
  }
  const token = text.trim();
  if (!token) throw new UsageError(`--token-file ${tokenFile} is empty`);
  return token;
}

export interface RemoteEnvironment {
  env: Record<string, string>;
  envPolicy: Required<EnvPolicy>;
}

/** The remote command's environment (see the module comment for the rules). */
export function buildRemoteEnv(
  info: Partial<EnvironmentInfo> | undefined,
  options: { tty: boolean; env?: Record<string, string>; inheritEnv?: boolean },
  local: NodeJS.ProcessEnv = process.env,
): RemoteEnvironment {
  const env: Record<string, string> = {
    LANG: local.LANG || 'C.UTF-8',
    TERM: local.TERM || (options.tty ? 'xterm-256color' : 'dumb'),
  };
  const home = info?.userHomeDir ? uriToPath(info.userHomeDir) : local.HOME;
  if (home) env.HOME = home;
  if (options.inheritEnv) {
    for (const [key, value] of Object.entries(local)) {
      if (value !== undefined && !NOT_FORWARDED.has(key)) env[key] = value;
    }
  }
  Object.assign(env, options.env ?? {});
  return {
    env,
    envPolicy: { inherit: 'core', ignoreDefaultExcludes: false, exclude: [], set: {}, includeOnly: [] },
  };
}

function uriToPath(uri: string): string | undefined {
  if (!uri.startsWith('file://')) return uri.startsWith('/') ? uri : undefined;
  try {
    return fileURLToPath(uri);
  } catch {
    return undefined;
  }
}

/**
 * The start of every remote command: parse its flags and read its token. Prints the help
 * (stdout, exit 0) or the usage error (stderr, exit 2) and returns undefined when there is
 * nothing more to do.
 */
export async function parseCommandLine(
  command: string,
  usage: string,
  parse: () => RemoteOptions | 'help',
): Promise<{ options: RemoteOptions; token: string | undefined; ca: string | undefined } | undefined> {
  try {
    const options = parse();
    if (options === 'help') {
      printHelp(usage);
      return undefined;
    }
    return { options, token: await readToken(options.tokenFile), ca: await readCa(options.caFile) };
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    reportUsageError(command, err.message);
    return undefined;
  }
}

