/**
 * `tether ps --url ws://…`: what runs on a tether server. Lists the sessions of the token
 * it presents (all of them with the server's admin token), one line per process, like ps.
 */
import type { ExecClient } from '../client/index.js';
import type { SessionListResult, SessionListing } from '../protocol/index.js';
import { formatAge, formatBytes } from '../util/format.js';
import { connectClient } from './connect.js';
import { readFleet, type FleetHost } from './fleet-file.js';
import { connectionOptionsHelp, parseLeadingOptions, readCa, readToken, type ConnectionOptions } from './remote-options.js';
import { printHelp, reportUsageError, UsageError } from './usage.js';

/** Like ssh and `tether exec`: 255 is tether's own failure (cannot connect, session lost). */
const EXIT_TETHER_ERROR = 255;
/** ps asks once: a server that is down is said so sooner than a command's 25 s. */
const DEFAULT_DEADLINE_MS = 5000;

const USAGE = `usage: tether ps --url ws://HOST:PORT [options]
       tether ps --url URL1 --url URL2 … | --fleet FILE [options]

Lists the sessions on a tether server and their processes: the sessions of your token, or
every session when the server was started with --admin-token-file and you present that
token. Needs a tether server (a Codex exec-server cannot list). Given several --url, or a
fleet file, it asks every host at once and lists them all in one table led by a HOST column.

options:
${connectionOptionsHelp('5s')}
  --fleet FILE              the hosts to ask, one a line: NAME URL [TOKEN_FILE] (# comments;
                            a host without a TOKEN_FILE uses --token-file); docs/fleet.md
  --json                    the server's answer as JSON (scope, sessions, processes); for
                            several hosts {"hosts": [...]}, each with its host and url, and
                            its scope and sessions or its error
  -h, --help                this text

exit status: 0 listed; 1 the server refused to list; 2 usage error; ${EXIT_TETHER_ERROR} the server
cannot be reached. Several hosts: every host that answered is listed, each failure is said
on stderr, and the status is the worst (${EXIT_TETHER_ERROR} if any host cannot be reached).

columns: SESSION (first 8 characters of its id), CLIENT (its client name), NAME (the name
given with tether exec --detach --name; shown with WATCHERS when some session has a name or
a watcher), LINK (attached,
or detached and when it expires; and, while the memory budget holds its output back, why:
"paused: over fair share (held of share)" or "paused: memory budget full"), PID, STATE (running, or exited and its code), AGE, OUT and
IN (bytes read from the process and written to its stdin), COMMAND. WATCHERS: how many
tether attach --watch follow the session (LINK "attached" means a writer is attached). With the admin token,
OWNER tells sessions of different tokens apart (a digest prefix, never the token).`;

interface PsOptions extends ConnectionOptions {
  json: boolean;
  /** --fleet FILE. */
  fleetFile?: string;
  /** Every --url given (several: one listing with a HOST column). */
  urls: string[];
}

export function parsePsArgs(argv: string[], environment: NodeJS.ProcessEnv = process.env): PsOptions | 'help' {
  let json = false;
  let fleetFile: string | undefined;
  const parsed = parseLeadingOptions(argv, environment, (name, value) => {
    if (name === '--json') json = true;
    else if (name === '--fleet') fleetFile = value();
    else return false;
    return true;
  });
  if (parsed === 'help') return 'help';
  if (parsed.operands.length > 0) throw new UsageError(`unexpected argument '${parsed.operands[0]}'`);
  return { ...parsed.connection, json, urls: parsed.urls, ...(fleetFile !== undefined ? { fleetFile } : {}) };
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
  // Adopted from a predecessor server (restart adoption: a restart, upgrade or crash), then any hold.
  const hold = `${s.adopted ? '; adopted' : ''}${s.budgetHold ? `; ${visible(s.budgetHold)}` : ''}`;
  if (s.attached) return `attached${hold}`;
  if (!s.expiresAt) return `detached${hold}`;
  return `detached, expires in ${formatAge(Math.max(0, Date.parse(s.expiresAt) - now))}${hold}`;
}

/** Extension `attach`: a session's name and how many watchers it has (absent from an older server). */
type AttachListing = { name?: unknown; watchers?: unknown };
const nameOf = (s: SessionListing): string => (typeof (s as AttachListing).name === 'string' ? visible((s as AttachListing).name as string) : '-');
const watchersOf = (s: SessionListing): number => (typeof (s as AttachListing).watchers === 'number' ? ((s as AttachListing).watchers as number) : 0);

/** NAME and WATCHERS are shown when some listed session has a name or a watcher (extension `attach`). */
export function showsAttach(results: SessionListResult[]): boolean {
  return results.some((r) => r.sessions.some((s) => nameOf(s) !== '-' || watchersOf(s) > 0));
}

/** The table's header and rows: one row per process; a session without processes gets one row of dashes. */
function listingRows(result: SessionListResult, now: number, withOwner: boolean, withAttach = showsAttach([result])): { header: string[]; rows: string[][] } {
  const header = [...(withOwner ? ['OWNER'] : []), 'SESSION', 'CLIENT', ...(withAttach ? ['NAME'] : []), 'LINK', ...(withAttach ? ['WATCHERS'] : []), 'PID', 'STATE', 'AGE', 'OUT', 'IN', 'COMMAND'];
  const rows: string[][] = [];
  for (const s of result.sessions) {
    const lead = [
      ...(withOwner ? [s.owner ?? ''] : []),
      s.session,
      visible(s.clientName) || '-',
      ...(withAttach ? [nameOf(s)] : []),
      linkState(s, now),
      ...(withAttach ? [String(watchersOf(s))] : []),
    ];
    if (s.processes.length === 0) rows.push([...lead, '-', '-', formatAge(now - Date.parse(s.createdAt)), '-', '-', '(no processes)']);
    for (const p of s.processes) {
      const state = (p.state === 'running' ? 'running' : `exited ${p.exitCode}`) + (p.pausedBy?.startsWith('output-disk') ? ` (paused: ${p.pausedBy})` : '');
      rows.push([...lead, String(p.pid), state, formatAge(p.ageMs), formatBytes(p.bytesOut), formatBytes(p.bytesIn), formatCommand(p.argv)]);
    }
  }
  return { header, rows };
}

/** Columns padded to their widest cell, the last one left ragged. */
function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

/** The table: one row per process; a session without processes gets one row of dashes. */
export function formatListing(result: SessionListResult, now = Date.now()): string {
  const { header, rows } = listingRows(result, now, result.scope === 'all');
  if (rows.length === 0) return result.scope === 'all' ? 'no sessions on this server' : 'no sessions of yours on this server';
  return table(header, rows);
}

/** Several hosts' listings in one table, each row led by its HOST (a fleet file's name, or the URL's host and path). */
export function formatFleetListing(listings: { host: string; result: SessionListResult }[], now = Date.now()): string {
  const withOwner = listings.some((l) => l.result.scope === 'all');
  const withAttach = showsAttach(listings.map((l) => l.result));
  let header: string[] = [];
  const rows: string[][] = [];
  for (const { host, result } of listings) {
    const part = listingRows(result, now, withOwner, withAttach);
    header = ['HOST', ...part.header];
    for (const row of part.rows) rows.push([visible(host), ...row]);
  }
  if (rows.length === 0) return listings.length === 0 ? 'no hosts answered' : `no sessions on ${listings.map((l) => visible(l.host)).join(', ')}`;
  return table(header, rows);
}

/** A host's name when only its URL is known: host and path (`front.example.com/h/box1`). */
export function hostLabel(url: string): string {
  try {
    const u = new URL(url);
    return `${u.host}${u.pathname.replace(/\/+$/, '')}`;
  } catch {
    return url;
  }
}

export async function run(argv: string[]): Promise<void> {
  let options: PsOptions | 'help';
  let token: string | undefined;
  let ca: string | undefined;
  let hosts: (FleetHost & { token: string | undefined })[] | null = null;
  try {
    options = parsePsArgs(argv);
    if (options !== 'help') {
      token = await readToken(options.tokenFile);
      ca = await readCa(options.caFile);
      // A fleet file, or several --url: every host asked, one table with a HOST column.
      if (options.fleetFile !== undefined || options.urls.length > 1) {
        const listed: FleetHost[] = [...(options.fleetFile !== undefined ? await readFleet(options.fleetFile) : []), ...options.urls.map((url) => ({ name: hostLabel(url), url }))];
        hosts = [];
        for (const h of listed) hosts.push({ ...h, token: h.tokenFile !== undefined ? await readToken(h.tokenFile) : token });
      }
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
  if (hosts !== null) {
    await listFleet(options, hosts, ca);
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

type HostAnswer = { host: string; url: string } & ({ result: SessionListResult } | { error: string; unreachable: boolean });

/** One host's listing (without ps's own session), or why not. */
async function listHost(options: PsOptions, host: FleetHost & { token: string | undefined }, ca: string | undefined): Promise<HostAnswer> {
  const where = { host: host.name, url: host.url };
  let client: ExecClient;
  try {
    client = await connectClient({ ...options, url: host.url }, { token: host.token, ca }, { clientName: 'tether-ps', recoveryDeadlineMs: DEFAULT_DEADLINE_MS });
  } catch (err) {
    return { ...where, error: `cannot connect: ${(err as Error).message}`, unreachable: true };
  }
  try {
    const result = await client.listSessions();
    result.sessions = result.sessions.filter((s) => !s.current);
    return { ...where, result };
  } catch (err) {
    return { ...where, error: (err as Error).message, unreachable: false };
  } finally {
    await client.close().catch(() => {});
  }
}

/** Every host asked at once; the answers in the order given; each failure said on stderr, the rest still listed. */
async function listFleet(options: PsOptions, hosts: (FleetHost & { token: string | undefined })[], ca: string | undefined): Promise<void> {
  const answers = await Promise.all(hosts.map((h) => listHost(options, h, ca)));
  const listed: { host: string; url: string; result: SessionListResult }[] = [];
  for (const a of answers) {
    if ('result' in a) listed.push(a);
    else process.stderr.write(`tether ps: ${visible(a.host)} (${visible(a.url)}): ${a.error}\n`);
  }
  if (options.json) {
    const json = answers.map((a) => ('result' in a ? { host: a.host, url: a.url, ...a.result } : { host: a.host, url: a.url, error: a.error }));
    process.stdout.write(`${JSON.stringify({ hosts: json }, null, 2)}\n`);
  } else {
    process.stdout.write(`${formatFleetListing(listed)}\n`);
  }
  const failed = answers.filter((a): a is Extract<HostAnswer, { error: string }> => 'error' in a);
  if (failed.some((a) => a.unreachable)) process.exitCode = EXIT_TETHER_ERROR;
  else if (failed.length > 0) process.exitCode = 1;
}
