/**
 * `tether attach NAME|ID [--watch] [--take] [--from-start] [--process ID]`: follows a
 * process of a session this terminal did not start (`tether exec --detach`, or a client
 * that died): its output to stdout/stderr, and, as the writer, this terminal's stdin and
 * Ctrl-C to it. Exits with the process's status when it ends. Detaching leaves it running:
 * `~.` typed right after a newline (stdin a terminal, as ssh), SIGHUP or SIGTERM; a watcher
 * detaches on Ctrl-C too. Detaching exits 0.
 */
import { Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { ExecClient, RpcError, ServerStoppedError, SessionLostError, type AttachedProcess, type ExecProcess } from '../../client/index.js';
import { restartingLine, SERVER_STOPPED_LINE } from '../../util/stop-notices.js';
import { DetachKeys } from './detach-keys.js';
import { connectionOptionsHelp, parseLeadingOptions, readCa, readToken, type ConnectionOptions } from '../remote-options.js';
import { printHelp, reportUsageError, UsageError } from '../usage.js';

const EXIT_TETHER_ERROR = 255;
/** The attach was refused (unknown session, a writer already attached, no such process). */
const EXIT_REFUSED = 1;

const USAGE = `usage: tether attach [options] NAME|ID

Follows a process running in a session this terminal did not start: one left running by
'tether exec --detach', or by a client that died. NAME is the name given with
'tether exec --name NAME'; ID is the full session id 'tether exec --detach' printed. Only sessions of
your token (any session with the server's admin token).

As the writer (the default) it prints the process's output from where the last writer
left off (what it had acknowledged), forwards this terminal's stdin to it (EOF closes
its stdin), and Ctrl-C sends it SIGINT; a --tty process gets this terminal's raw keys and
size. A session already has a writer: --take moves it here (the other one is told and
watches on), or --watch follows it read-only. Exits with the process's exit status once
it ends.

options:
${connectionOptionsHelp()}
  --watch                   read-only: output only; stdin is not read, Ctrl-C detaches;
                            a watcher never slows the process down
  --take                    become the writer even if another attachment is (it is told,
                            and keeps watching)
  --from-start              print the output from its first byte (what the server still
                            holds; an older part it no longer holds is said on stderr)
  --process ID              which process of the session (default: its only one, or its
                            only running one)
  -h, --help                this text

detach: type ~. right after a newline (stdin a terminal, as ssh; ~~ sends one ~), or send
SIGHUP or SIGTERM: the process runs on, 'tether attach' again takes up where this one left.
Detaching says "detached from <session>" on stderr and exits 0.

exit status: the process's (128+N if signal N killed it); 0 when detached; ${EXIT_REFUSED} when the
attach is refused (unknown session, a writer attached without --take, no such process);
${EXIT_TETHER_ERROR} if the server cannot be reached or the session is lost; 2 usage errors.`;

const say = (line: string) => process.stderr.write(`tether attach: ${line}\n`);

export interface AttachCliOptions extends ConnectionOptions {
  target: string;
  watch: boolean;
  take: boolean;
  fromStart: boolean;
  processId?: string;
}

export function parseAttachArgs(argv: string[], environment: NodeJS.ProcessEnv = process.env): AttachCliOptions | 'help' {
  const own = { watch: false, take: false, fromStart: false, processId: undefined as string | undefined };
  const parsed = parseLeadingOptions(argv, environment, (name, value) => {
    switch (name) {
      case '--watch':
        own.watch = true;
        return true;
      case '--take':
        own.take = true;
        return true;
      case '--from-start':
        own.fromStart = true;
        return true;
      case '--process':
        own.processId = value();
        if (own.processId === '') throw new UsageError('--process needs a process id');
        return true;
      default:
        return false;
    }
  });
  if (parsed === 'help') return 'help';
  if (parsed.operands.length === 0) throw new UsageError('no session given (tether attach NAME|ID)');
  if (parsed.operands.length > 1) throw new UsageError(`unexpected argument '${parsed.operands[1]}'`);
  if (own.watch && own.take) throw new UsageError('--take makes this the writer; --watch only watches: give one');
  const { processId, ...flags } = own;
  return { ...parsed.connection, target: parsed.operands[0]!, ...flags, ...(processId !== undefined ? { processId } : {}) };
}

/** The process to follow: --process (an id, or a unique prefix), else the only one, else the only running one. */
export function chooseProcess(processes: readonly AttachedProcess[], wanted: string | undefined): AttachedProcess | string {
  if (wanted !== undefined) {
    const exact = processes.find((p) => p.processId === wanted);
    if (exact) return exact;
    const prefixed = processes.filter((p) => p.processId.startsWith(wanted));
    if (prefixed.length === 1) return prefixed[0]!;
    return prefixed.length === 0 ? `the session has no process ${wanted}${listIds(processes)}` : `--process ${wanted} matches several processes${listIds(prefixed)}`;
  }
  if (processes.length === 1) return processes[0]!;
  if (processes.length === 0) return 'the session has no process to follow';
  const running = processes.filter((p) => p.state === 'running');
  if (running.length === 1) return running[0]!;
  return `the session has ${processes.length} processes: choose one with --process${listIds(processes)}`;
}

function listIds(processes: readonly AttachedProcess[]): string {
  return processes.length === 0 ? '' : ` (${processes.map((p) => `${p.processId}: ${p.argv.join(' ')}`).join('; ')})`;
}

export async function run(argv: string[]): Promise<void> {
  let options: AttachCliOptions | 'help';
  let token: string | undefined;
  let ca: string | undefined;
  try {
    options = parseAttachArgs(argv);
    if (options !== 'help') {
      token = await readToken(options.tokenFile);
      ca = await readCa(options.caFile);
    }
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    reportUsageError('attach', err.message);
    return;
  }
  if (options === 'help') {
    printHelp(USAGE);
    return;
  }
  return exit(await attach(options, token, ca));
}

async function attach(options: AttachCliOptions, token: string | undefined, ca: string | undefined): Promise<number> {
  // Until the handle exists, a signal only stops the attach: nothing of the session changes.
  const early = new AbortController();
  const onEarly = () => early.abort();
  for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(s, onEarly);
  let chosen: AttachedProcess | string = 'the session has no process to follow';
  let client: ExecClient;
  try {
    client = await ExecClient.attach(options.url, options.target, {
      token,
      ca,
      clientName: 'tether-attach',
      recoveryDeadlineMs: options.recoveryDeadlineMs,
      keepaliveTimeoutMs: options.keepaliveTimeoutMs,
      role: options.watch ? 'watcher' : 'writer',
      take: options.take,
      fromStart: options.fromStart,
      // One process is followed here: processes the writer starts later are not ours to read.
      followNew: false,
      signal: early.signal,
      // Written straight here (a writer acknowledges once the local write completed).
      sinks: (p, all) => {
        chosen = chooseProcess(all, options.processId);
        if (typeof chosen !== 'string' && chosen.processId === p.processId) return { stdout: process.stdout, stderr: process.stderr };
        // The others are not ours to take: sinks that never complete leave their output
        // unacknowledged, for whoever attaches to them (a handle's own streams would count it taken).
        return { stdout: neverTaken(), stderr: neverTaken() };
      },
      logger: (level, message) => {
        if (level === 'warn') say(message);
      },
    });
  } catch (err) {
    if (early.signal.aborted) return 0;
    if (err instanceof RpcError) {
      say(err.message);
      return EXIT_REFUSED;
    }
    say(`cannot attach at ${options.url}: ${(err as Error).message}`);
    return EXIT_TETHER_ERROR;
  } finally {
    for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.off(s, onEarly);
  }
  const label = client.sessionName ?? client.sessionId.slice(0, 8);
  const target = chosen as AttachedProcess | string;
  if (typeof target === 'string') {
    say(target);
    await client.detach();
    return EXIT_REFUSED;
  }
  const proc = client.processes().find((p) => p.id === target.processId)!;
  return follow(client, proc, label, options);
}

async function follow(client: ExecClient, proc: ExecProcess, label: string, options: AttachCliOptions): Promise<number> {
  let writer = !options.watch;
  const terminal = process.stdin.isTTY === true;
  let detachRequested!: () => void;
  const detached = new Promise<'detached'>((resolve) => (detachRequested = () => resolve('detached')));

  proc.on('gap', ({ fromSeq, toSeq }) => say(`output seqs ${fromSeq}..${toSeq} are no longer held by the server (not shown)`));
  client.on('writer-lost', () => {
    writer = false;
    say('the writer was taken by another attachment; watching');
    stopStdin();
  });
  client.on('restarting', (event) => say(restartingLine(event.keptMs)));
  client.on('state', (change) => {
    if (change.state === 'recovering') say(`connection lost (${change.reason ?? 'unknown reason'}); reconnecting…`);
  });
  client.on('recovered', (event) => say(`reconnected after ${Math.round(event.downtimeMs)} ms`));

  // Stdin: a writer forwards it (through the ~. escape on a terminal); a watcher reads it
  // only on a terminal, for the ~. escape.
  const keys = terminal ? new DetachKeys() : null;
  const raw = terminal && (proc.tty || !writer) && typeof process.stdin.setRawMode === 'function';
  if (raw) process.stdin.setRawMode(true);
  const onData = (chunk: Buffer) => {
    // A watcher's terminal is raw (for ~.): its Ctrl-C arrives as a byte, and detaches.
    if (raw && !writer && chunk.includes(0x03)) return detachRequested();
    const { forward, detach } = keys ? keys.feed(chunk) : { forward: chunk, detach: false };
    if (writer && forward.length > 0 && proc.stdin && !proc.stdin.destroyed) proc.stdin.write(forward);
    if (detach) detachRequested();
  };
  const onEnd = () => {
    const rest = keys?.flush();
    if (writer && proc.stdin && !proc.stdin.destroyed) {
      if (rest && rest.length > 0) proc.stdin.write(rest);
      proc.stdin.end(); // local EOF closes the remote stdin, as tether exec does
    }
  };
  let stdinOn = false;
  if (writer || terminal) {
    process.stdin.on('data', onData);
    process.stdin.on('end', onEnd);
    stdinOn = true;
  }
  function stopStdin(): void {
    if (!stdinOn || terminal) return; // a terminal still reads the ~. escape
    process.stdin.off('data', onData);
    process.stdin.off('end', onEnd);
    process.stdin.pause();
    stdinOn = false;
  }

  // Ctrl-C (not in raw mode) interrupts the process as the writer, detaches a watcher;
  // SIGHUP and SIGTERM detach.
  const onInt = () => {
    if (writer) void proc.signal('interrupt').catch(() => {});
    else detachRequested();
  };
  process.on('SIGINT', onInt);
  process.on('SIGHUP', detachRequested);
  process.on('SIGTERM', detachRequested);

  const local = [process.stdout, process.stderr].find((s) => s.isTTY === true && s.columns > 0 && s.rows > 0);
  const onResize = () => {
    if (writer && local) void proc.resize(local.columns, local.rows).catch(() => {});
  };
  if (proc.tty && local) {
    onResize();
    local.on('resize', onResize);
  }

  try {
    const outcome = await Promise.race([detached, proc.closed.then(() => proc.exitCode ?? 0, (err: unknown) => err as Error)]);
    if (outcome === 'detached') {
      // What was written is told to the server before the socket goes (the next attach takes up there).
      await client.detach();
      say(`detached from ${label} (it runs on: tether attach ${label} to follow it again)`);
      return 0;
    }
    if (outcome instanceof Error) {
      say(describe(outcome));
      return EXIT_TETHER_ERROR;
    }
    await Promise.all([finished(proc.stdout).catch(() => {}), finished(proc.stderr).catch(() => {})]);
    await Promise.all([drained(process.stdout), drained(process.stderr)]);
    // The writer of a session whose only process this was, and nobody watches it: end it
    // (nothing lingers for its keep). Otherwise leave it as it is: its other processes (and
    // their output nobody took yet) stay for their own attach, and a watcher still reading
    // the end is not cut off (the session expires after its keep).
    if (writer && client.processes().length === 1 && (await watchers(client)) === 0) await client.close();
    else await client.detach();
    return outcome;
  } finally {
    process.off('SIGINT', onInt);
    process.off('SIGHUP', detachRequested);
    process.off('SIGTERM', detachRequested);
    local?.off('resize', onResize);
    if (raw) process.stdin.setRawMode(false);
    process.stdin.off('data', onData);
    process.stdin.off('end', onEnd);
    process.stdin.pause();
  }
}

/** How many watchers the client's session has (session/list); unknown counts as some. */
async function watchers(client: ExecClient): Promise<number> {
  try {
    const { sessions } = await client.listSessions();
    const mine = sessions.find((s) => s.current) as { watchers?: unknown } | undefined;
    return typeof mine?.watchers === 'number' ? mine.watchers : 1;
  } catch {
    return 1;
  }
}

/** A sink whose writes never complete: output written to it is never acknowledged. */
function neverTaken(): Writable {
  return new Writable({ write: () => {} });
}

function describe(err: Error): string {
  if (err instanceof ServerStoppedError) return SERVER_STOPPED_LINE;
  if (err instanceof SessionLostError) return `${err.message}; the session is gone`;
  return err.message;
}

function drained(stream: NodeJS.WritableStream): Promise<void> {
  return new Promise((resolve) => stream.write('', () => resolve()));
}

async function exit(code: number): Promise<void> {
  await drained(process.stdout);
  await drained(process.stderr);
  process.exit(code);
}
