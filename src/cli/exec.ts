/**
 * `tether exec --url ws://… [options] command args…`
 *
 * Runs one command on a tether server (or a Codex exec-server) as if it were local: local
 * stdin/stdout/stderr are piped to it, the exit status is the remote one (128+N when a
 * signal killed it), and a dropped link is survived with a one-line notice on stderr.
 */
import { Writable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { ServerStoppedError, SessionLostError, type ExecClient, type ExecProcess, type RecoveredEvent, type SpawnOptions, type StateChange } from '../client/index.js';
import { restartingLine, SERVER_STOPPED_LINE } from '../util/stop-notices.js';
import { RpcError } from '../protocol/errors.js';
import { connectClient } from './connect.js';
import { keepLastShortfall, keepShortfall } from './keep-notice.js';
import { catchEarlySignals, type EarlySignals } from './early-signals.js';
import { describeStartFailure } from './start-failure.js';
import { buildRemoteEnv, parseCommandLine, parseRemoteArgs, REMOTE_OPTIONS_HELP, type RemoteOptions } from './remote-options.js';

/** Like ssh: 255 means tether itself failed (cannot connect, session lost), not the command. */
export const EXIT_TETHER_ERROR = 255;
/** Like a shell: the remote program could not be started. */
export const EXIT_CANNOT_START = 127;
/** Our reader went away: exit as a local program killed by SIGPIPE would (128+13). */
const EXIT_BROKEN_PIPE = 128 + 13;
const BROKEN_PIPE = Symbol('EPIPE');

const USAGE = `usage: tether exec [options] <command> [args…]

Runs <command> on a tether server, piping this terminal's stdin/stdout/stderr to it, and
keeps it running through network drops (the session resumes and missed output is replayed).
Options end at the first argument that is not one, as with ssh and docker run: everything
from <command> on is the remote command's. A '--' before it is allowed, and needed only for
a command whose name starts with '-'.

options:
${REMOTE_OPTIONS_HELP}
  --detach                  start the command and exit at once, leaving it running in
                            its session (kept 8h after this exits unless --keep says
                            otherwise); prints one line on stdout:
                              session=<full session id> [name=<NAME>] process=<process id>
                            then 'tether attach NAME|ID' follows it, 'tether ps' lists it.
                            Stdin is not forwarded; the command's output waits, held by
                            the server, for the first tether attach
  --name NAME               the session's name (1..64 of A-Z a-z 0-9 . _ -), unique among
                            the live sessions of your token: 'tether attach NAME' follows
                            it (detached, or when this client died)
  -h, --help                this text

The remote command gets the server's core variables (PATH, HOME, USER, SHELL…)
and LANG/TERM from this side; --env and --inherit-env add to that.

DURATION: a number and its unit: 500ms, 25s, 2m.

example: tether exec --url ws://build-box:8765 --cwd /src make -j8 test

exit status: the remote command's (128+N if signal N killed it); ${EXIT_CANNOT_START} if it could
not be started; ${EXIT_TETHER_ERROR} if the server cannot be reached or the session is lost; 2 for
usage errors.`;

const say = (line: string) => process.stderr.write(`tether exec: ${line}\n`);

export async function run(argv: string[]): Promise<void> {
  const parsed = await parseCommandLine('exec', USAGE, () => parseRemoteArgs(argv, process.env, 'exec'));
  if (!parsed) return;
  const { options, token, ca } = parsed;

  if (options.detach) return exit(await runDetached(options, { token, ca }));
  const early = catchEarlySignals();
  let client: ExecClient;
  try {
    client = await connectClient(options, { token, ca }, {
      clientName: 'tether-exec',
      ...(options.name !== undefined ? { name: options.name } : {}),
      // Both output streams are always consumed here, so a slow local reader (a pager, a
      // slow pipe) may safely slow the remote command instead of filling our memory.
      outputHighWaterMark: 8 * 1024 * 1024,
      signal: early.signal,
      sessionKeepMs: options.keepMs,
      // Warnings only ("cannot reach …; retrying"): the rest has its own one-line notices.
      logger: (level, message) => {
        if (level === 'warn') say(message);
      },
    });
  } catch (err) {
    if (early.exitCode !== undefined) return exit(early.exitCode);
    say(`cannot connect to ${options.url}: ${(err as Error).message}`);
    return exit(EXIT_TETHER_ERROR);
  }
  reportRecoveries(client);
  const shortfall = keepShortfall(client, options.keepMs);
  if (shortfall) say(shortfall);
  const keepLastNotice = keepLastShortfall(client, options.keepLast);
  if (keepLastNotice) say(keepLastNotice);

  // Every way out ends the session (session/close) rather than leaving it detached.
  const code = await runRemote(client, options, early);
  await client.close().catch(() => {});
  return exit(code);
}

/** How long a detached command's session outlives its client when --keep does not say. */
export const DETACHED_KEEP_MS = 8 * 60 * 60 * 1000;

/**
 * --detach: start the command, print `session=<id> [name=<name>] process=<id>`, and leave
 * without closing the session: it stays, detached, for its keep (8h by default, within the
 * server's --max-session-ttl), and `tether attach` takes it up. Nothing is acknowledged, so
 * the first attach gets all the output from the first byte (held by the server meanwhile).
 */
async function runDetached(options: RemoteOptions, credentials: { token?: string; ca?: string }): Promise<number> {
  const keepMs = options.keepMs ?? DETACHED_KEEP_MS;
  let client: ExecClient;
  try {
    client = await connectClient(options, credentials, {
      clientName: 'tether-exec',
      sessionKeepMs: keepMs,
      ...(options.name !== undefined ? { name: options.name } : {}),
      logger: (level, message) => {
        if (level === 'warn') say(message);
      },
    });
  } catch (err) {
    say(err instanceof RpcError ? (err as Error).message : `cannot connect to ${options.url}: ${(err as Error).message}`);
    return err instanceof RpcError ? 1 : EXIT_TETHER_ERROR;
  }
  if (!client.extensions.has('sessionKeep')) {
    say('this server cannot keep a session for later (a Codex exec-server or an older tether): nothing was started');
    await client.close().catch(() => {});
    return EXIT_TETHER_ERROR;
  }
  const shortfall = keepShortfall(client, keepMs);
  if (shortfall) say(shortfall);
  let proc: ExecProcess;
  try {
    const info = await client.environmentInfo();
    // A later writer (tether attach) forwards its stdin. Nothing that arrives before we leave
    // counts as taken (a handle's own streams count what they buffer): all of it stays
    // unacknowledged, for the first tether attach.
    proc = client.spawn(options.command, { ...spawnOptions(options, buildRemoteEnv(info, options)), stdout: neverTaken(), stderr: neverTaken() });
    await new Promise<void>((resolve, reject) => {
      proc.once('spawn', () => resolve());
      proc.closed.catch(reject);
    });
  } catch (err) {
    say(err instanceof RpcError ? describeStartFailure(err, options.command[0]!, options.cwd) : describe(err));
    await client.close().catch(() => {});
    return err instanceof RpcError ? EXIT_CANNOT_START : EXIT_TETHER_ERROR;
  }
  const name = client.sessionName;
  process.stdout.write(`session=${client.sessionId}${name !== undefined ? ` name=${name}` : ''} process=${proc.id}\n`);
  // No session/close: the session stays, detached, with its process running.
  await client.detach();
  return 0;
}

/** What both ways of running a command spawn it with: where, with what environment, a tty or not, stdin piped. */
function spawnOptions(options: RemoteOptions, { env, envPolicy }: ReturnType<typeof buildRemoteEnv>): SpawnOptions {
  return {
    cwd: options.cwd,
    env,
    envPolicy,
    tty: options.tty,
    pipeStdin: true,
    ...(options.keepLast !== undefined ? { keepLast: options.keepLast } : {}),
  };
}

/** A sink whose writes never complete: output written to it is never acknowledged. */
function neverTaken(): Writable {
  return new Writable({ write: () => {} });
}

async function runRemote(client: ExecClient, options: RemoteOptions, early: EarlySignals): Promise<number> {
  let proc: ExecProcess;
  try {
    const info = await client.environmentInfo();
    const terminal = options.tty ? localTerminal() : undefined;
    // Output goes straight to our stdout/stderr; with acks it counts as consumed once the
    // local write completed, so a slow reader here slows the remote command.
    proc = client.spawn(options.command, {
      ...spawnOptions(options, buildRemoteEnv(info, options)),
      terminalSize: terminal && { cols: terminal.columns, rows: terminal.rows },
      stdout: process.stdout,
      stderr: process.stderr,
    });
    // --keep-last: every range the server dropped is said, never silently skipped.
    proc.on('gap', ({ fromSeq, toSeq }) => say(`output seqs ${fromSeq}..${toSeq} were dropped (--keep-last)`));
  } catch (err) {
    if (early.exitCode !== undefined) return early.exitCode;
    // Nothing was started yet: the stop killed no command of ours.
    say(err instanceof ServerStoppedError ? 'server stopped before the command started' : describe(err));
    return EXIT_TETHER_ERROR;
  } finally {
    early.release(); // from here on, signals go to the remote command (forwardSignals)
  }

  // `tether exec -- yes | head -1`: the reader went away. A local program would die of
  // SIGPIPE; do the same to the remote one and exit as if killed by it (128+13).
  const brokenPipe = new Promise<typeof BROKEN_PIPE>((resolve) => {
    for (const out of [process.stdout, process.stderr]) {
      out.on('error', (err: NodeJS.ErrnoException) => {
        if (err.code !== 'EPIPE') return;
        void proc.terminate().catch(() => {});
        resolve(BROKEN_PIPE);
      });
    }
  });
  const restoreTerminal = wireStdin(proc, options.tty);
  const releaseSignals = forwardSignals(proc, options.tty);
  const releaseSize = options.tty ? followTerminalSize(proc) : () => {};
  // Another attachment took the session (`tether attach --take`): this one watches on, and
  // says so; what is typed here (and Ctrl-C) no longer reaches the command.
  client.once('writer-lost', () => {
    say("this session was taken by another attachment (tether attach --take): watching on; this terminal's input and signals no longer reach the command");
    restoreTerminal();
    releaseSignals();
    releaseSize();
  });
  try {
    const code = await Promise.race([brokenPipe, proc.closed.then(() => proc.exitCode ?? 0, (err: unknown) => failureCode(err, options))]);
    if (code === BROKEN_PIPE) return EXIT_BROKEN_PIPE;
    // Exit only once every byte received is written here: the handle's streams have ended
    // (all their data went through the pipes), then the local writes have completed. Even a
    // lost session's output so far is written before the 255.
    const outcome = await Promise.race([brokenPipe, written(proc)]);
    return outcome === BROKEN_PIPE ? EXIT_BROKEN_PIPE : code;
  } finally {
    releaseSize();
    releaseSignals();
    restoreTerminal();
  }
}

function failureCode(err: unknown, options: RemoteOptions): number {
  if (err instanceof RpcError) {
    say(describeStartFailure(err, options.command[0]!, options.cwd));
    return EXIT_CANNOT_START;
  }
  say(describe(err));
  return EXIT_TETHER_ERROR;
}

/** Resolves when both output streams have ended and everything they carried reached the local descriptors. */
async function written(proc: ExecProcess): Promise<void> {
  await Promise.all([finished(proc.stdout).catch(() => {}), finished(proc.stderr).catch(() => {})]);
  await Promise.all([drained(process.stdout), drained(process.stderr)]);
}

/** The local terminal (stdout, or stderr when stdout is redirected), if there is one. */
function localTerminal(): NodeJS.WriteStream | undefined {
  return [process.stdout, process.stderr].find((s) => s.isTTY === true && s.columns > 0 && s.rows > 0);
}

/** Every SIGWINCH (Node's 'resize' on the terminal) resizes the remote terminal too. */
function followTerminalSize(proc: ExecProcess): () => void {
  const terminal = localTerminal();
  if (!terminal) return () => {};
  const onResize = () => void proc.resize(terminal.columns, terminal.rows).catch(() => {});
  terminal.on('resize', onResize);
  return () => terminal.off('resize', onResize);
}

/** Local stdin → remote stdin. With --tty and a local terminal, raw mode: keys (Ctrl-C too) go to the remote pty. */
function wireStdin(proc: ExecProcess, tty: boolean): () => void {
  const stdin = process.stdin;
  const raw = tty && stdin.isTTY === true;
  if (raw) stdin.setRawMode(true);
  if (proc.stdin) stdin.pipe(proc.stdin); // local EOF closes the remote stdin (tether extension)
  return () => {
    if (proc.stdin) stdin.unpipe(proc.stdin);
    if (raw) stdin.setRawMode(false);
    stdin.pause();
  };
}

/**
 * Ctrl-C interrupts the remote command (a second one terminates it); SIGTERM and SIGHUP
 * terminate it. The exit status then comes from the remote side as usual.
 */
function forwardSignals(proc: ExecProcess, tty: boolean): () => void {
  let interrupts = 0;
  const onInt = () => {
    interrupts += 1;
    if (interrupts === 1 && !tty) void proc.signal('interrupt').catch(() => {});
    else void proc.terminate().catch(() => {});
  };
  const onTerm = () => void proc.terminate().catch(() => {});
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);
  process.on('SIGHUP', onTerm);
  return () => {
    process.off('SIGINT', onInt);
    process.off('SIGTERM', onTerm);
    process.off('SIGHUP', onTerm);
  };
}

function reportRecoveries(client: ExecClient): void {
  let restarting = false;
  client.on('restarting', (event) => {
    restarting = true;
    say(restartingLine(event.keptMs));
  });
  client.on('state', (change: StateChange) => {
    if (change.state !== 'recovering') return;
    // The restart was already told, in better words.
    if (!restarting) say(`connection lost (${change.reason ?? 'unknown reason'}); reconnecting…`);
    restarting = false;
  });
  client.on('recovered', (event: RecoveredEvent) => {
    say(`reconnected after ${Math.round(event.downtimeMs)} ms; session resumed`);
  });
}

function describe(err: unknown): string {
  // The server said so as it stopped: the whole truth in its own words.
  if (err instanceof ServerStoppedError) return SERVER_STOPPED_LINE;
  if (err instanceof SessionLostError) {
    // Only what is known: after a silent drop the server may be running (then its TTL ends the
    // command) or gone (then the command went with it).
    const fate: Record<SessionLostError['reason'], string> = {
      expired: 'the remote command was killed with its session',
      deadline: "if the server is still running, it kills the remote command when the session's TTL runs out",
      auth: "if the server is still running, it kills the remote command when the session's TTL runs out",
      closed: 'the remote command was terminated',
      stopped: 'the remote command was killed when the server stopped',
    };
    return `${err.message}; ${fate[err.reason]}`;
  }
  return err instanceof Error ? err.message : String(err);
}

function drained(stream: NodeJS.WritableStream): Promise<void> {
  return new Promise((resolve) => stream.write('', () => resolve()));
}

/** Exit once stdout/stderr are flushed; local stdin must not keep the process alive. */
async function exit(code: number): Promise<void> {
  if (code !== EXIT_BROKEN_PIPE) {
    await drained(process.stdout);
    await drained(process.stderr);
  }
  process.exit(code);
}
