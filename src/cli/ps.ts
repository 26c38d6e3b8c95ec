/**
 * `tether ps --url ws://…`: what runs on a tether server. Lists the sessions of the token
 * it presents (all of them with the server's admin token), one line per process, like ps.
 */
import type { ExecClient } from '../client/index.js';
import type { SessionListResult, SessionListing } from '../protocol/index.js';
import { formatAge, formatBytes } from '../util/format.js';
import { connectClient } from './connect.js';
import { connectionOptionsHelp, parseLeadingOptions, readCa, readToken, type ConnectionOptions } from './remote-options.js';
import { printHelp, reportUsageError, UsageError } from './usage.js';

/** Like ssh and `tether exec`: 255 is tether's own failure (cannot connect, session lost). */
const EXIT_TETHER_ERROR = 255;
/** ps asks once: a server that is down is said so sooner than a command's 25 s. */
const DEFAULT_DEADLINE_MS = 5000;

const USAGE = `usage: tether ps --url ws://HOST:PORT [options]

Lists the sessions on a tether server and their processes: the sessions of your token, or
every session when the server was started with --admin-token-file and you present that
token. Needs a tether server (a Codex exec-server cannot list).

options:
${connectionOptionsHelp('5s')}
  --json                    the server's answer as JSON (scope, sessions, processes)
  -h, --help                this text

exit status: 0 listed; 1 the server refused to list; 2 usage error; ${EXIT_TETHER_ERROR} the server
cannot be reached.

columns: SESSION (first 8 characters of its id), CLIENT (its client name), LINK (attached,
or detached and when it expires; and, while the memory budget holds its output back, why:
"paused: over fair share (held of share)" or "paused: memory budget full"), PID, STATE (running, or exited and its code), AGE, OUT and
IN (bytes read from the process and written to its stdin), COMMAND. With the admin token,
OWNER tells sessions of different tokens apart (a digest prefix, never the token).`;

interface PsOptions extends ConnectionOptions {
  json: boolean;
}

export function parsePsArgs(argv: string[], environment: NodeJS.ProcessEnv = process.env): PsOptions | 'help' {
  let json = false;
  const parsed = parseLeadingOptions(argv, environment, (name) => {
    if (name !== '--json') return false;
    json = true;
    return true;
  });
  if (parsed === 'help') return 'help';
  if (parsed.operands.length > 0) throw new UsageError(`unexpected argument '${parsed.operands[0]}'`);
  return { ...parsed.connection, json };
}

/**
 * What a client chose (its name, argv) reaches the operator's terminal: control characters
 * (escape sequences, newlines) are shown escaped, never sent raw.
 */
export function visible(text: string): string {
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

/** argv as a shell would need it typed (quoted only where needed), control characters escaped. */
export function formatCommand(argv: string[]): string {
  return argv.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${visible(a).replace(/'/g, `'\\''`)}'`)).join(' ');
}

function linkState(s: SessionListing, now: number): string {
  // Held back by the memory budget: said with the link, so the operator sees who and why.
  // Adopted from a predecessor server (issue #27: restart, upgrade or crash), then any hold.
  const hold = `${s.adopted ? '; adopted' : ''}${s.budgetHold ? `; ${visible(s.budgetHold)}` : ''}`;
  if (s.attached) return `attached${hold}`;
  if (!s.expiresAt) return `detached${hold}`;
  return `detached, expires in ${formatAge(Math.max(0, Date.parse(s.expiresAt) - now))}${hold}`;
}

/** The table: one row per process; a session without processes gets one row of dashes. */
export function formatListing(result: SessionListResult, now = Date.now()): string {
  const withOwner = result.scope === 'all';
  const header = [...(withOwner ? ['OWNER'] : []), 'SESSION', 'CLIENT', 'LINK', 'PID', 'STATE', 'AGE', 'OUT', 'IN', 'COMMAND'];
  const rows: string[][] = [];
  for (const s of result.sessions) {
    const lead = [...(withOwner ? [s.owner ?? ''] : []), s.session, visible(s.clientName) || '-', linkState(s, now)];
    if (s.processes.length === 0) rows.push([...lead, '-', '-', formatAge(now - Date.parse(s.createdAt)), '-', '-', '(no processes)']);
    for (const p of s.processes) {
      const state = p.state === 'running' ? 'running' : `exited ${p.exitCode}`;
      rows.push([...lead, String(p.pid), state, formatAge(p.ageMs), formatBytes(p.bytesOut), formatBytes(p.bytesIn), formatCommand(p.argv)]);
    }
  }
  if (rows.length === 0) return result.scope === 'all' ? 'no sessions on this server' : 'no sessions of yours on this server';
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

export async function run(argv: string[]): Promise<void> {
  let options: PsOptions | 'help';
  let token: string | undefined;
  let ca: string | undefined;
  try {
    options = parsePsArgs(argv);
    if (options !== 'help') {
      token = await readToken(options.tokenFile);
      ca = await readCa(options.caFile);
    }
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    reportUsageError('ps', err.message);
    return;
  }
  if (options === 'help') {
    printHelp(USAGE);
    return;
  }
  let client: ExecClient;
  try {
    client = await connectClient(options, { token, ca }, { clientName: 'tether-ps', recoveryDeadlineMs: DEFAULT_DEADLINE_MS });
  } catch (err) {
    process.stderr.write(`tether ps: cannot connect to ${options.url}: ${(err as Error).message}\n`);
    process.exitCode = EXIT_TETHER_ERROR;
    return;
  }
  try {
    const result = await client.listSessions();
    // Its own session exists only to ask: not part of the answer.
    result.sessions = result.sessions.filter((s) => !s.current);
    process.stdout.write(options.json ? `${JSON.stringify(result, null, 2)}\n` : `${formatListing(result)}\n`);
  } catch (err) {
    process.stderr.write(`tether ps: ${(err as Error).message}\n`);
    process.exitCode = 1;
  } finally {
    await client.close().catch(() => {});
  }
}
