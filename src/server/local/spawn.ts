/**
 * Starting a child: every command, with pipes or on a pseudo-terminal, runs under its own
 * `tether-keeper` (keeper.ts, native/keeper.c), which owns the terminal, adopts everything the
 * command leaves behind and kills that whole tree on request or when the server dies. This
 * file is the whole of "how a process is run"; what happens to its output (numbering,
 * retention, flow control) is `ManagedProcess`'s business, and it sees every kind of child
 * through the same small `SpawnedChild` surface (backend/child.ts, which this implements).
 */
import { constants as osConstants } from 'node:os';
import { ErrorCode, internalError, RpcError, type StartErrorDetail, type OutputStream } from '../../protocol/index.js';
import type { AdoptedChild, ChildEvents, ChildSpec, KeptChild, SpawnedChild } from '../backend/index.js';
import { KeptProcess, type KeeperDump } from './keeper/keeper.js';
import { osErrorMessage } from '../../util/os-error.js';
import { quoted } from '../../util/format.js';

/** A terminal's size until the client says otherwise (what node-pty used, and Codex). */
const DEFAULT_TTY_SIZE = { cols: 80, rows: 24 } as const;

/**
 * Spawns the child; rejects with -32603 naming what failed (spawnError) if it cannot start (nothing is
 * left behind). Its events reach `events` only after the microtasks that follow the
 * resolution — in which the caller registers the process and answers process/start — so no
 * client hears of a process (and signals it) before the server knows it by its id.
 */
export async function spawnChild(spec: ChildSpec, events: ChildEvents): Promise<SpawnedChild> {
  const [file, ...args] = spec.argv as [string, ...string[]];
  let child: KeptProcess;
  try {
    child = KeptProcess.spawn({
      file,
      args,
      cwd: spec.cwd,
      // A terminal gets a TERM, as node-pty gave it (programs need one to draw).
      env: spec.tty ? { TERM: 'xterm-256color', ...spec.env } : spec.env,
      argv0: spec.arg0 ?? undefined,
      tty: spec.tty ? (spec.terminalSize ?? DEFAULT_TTY_SIZE) : undefined,
      stdin: spec.pipeStdin,
      keep: spec.keep,
    });
  } catch (err) {
    throw spawnError(err, spec);
  }
  const wrapped = wrapChild(child, spec.tty, events);
  try {
    await child.started;
  } catch (err) {
    // The keeper was told to end and every channel is closed (keeper.ts): nothing is left.
    throw spawnError(err, spec);
  }
  wrapped.begin();
  return wrapped.child;
}

/**
 * Adopts the kept keeper at `socketPath` (restart adoption): the child as `spawnChild` gives it, and
 * the keeper's dump, from which the caller rebuilds the process's log; `shapeOf` tells from
 * the dump (its meta) whether it has a terminal and a stdin. No event reaches the events
 * given to `bind` before `begin()`.
 */
export async function adoptChild(
  socketPath: string,
  timeoutMs: number,
  shapeOf: (dump: KeeperDump) => { tty: boolean; pipeStdin: boolean },
  maxDumpBytes?: number,
): Promise<AdoptedChild> {
  let shape = { tty: false, pipeStdin: false };
  const { proc, dump } = await KeptProcess.adopt(
    socketPath,
    timeoutMs,
    (d) => {
      shape = shapeOf(d);
      return { tty: shape.tty, stdin: shape.pipeStdin };
    },
    maxDumpBytes,
  );
  let target: ChildEvents | null = null;
  const events: ChildEvents = {
    output: (stream, data) => target?.output(stream, data),
    exit: (code) => target?.exit(code),
    close: () => target?.close(),
    streamError: (stream, error) => target?.streamError(stream, error),
  };
  const wrapped = wrapChild(proc, shape.tty, events);
  return { child: wrapped.child, dump, bind: (e) => (target = e), begin: () => wrapped.begin() };
}

/** The SpawnedChild of a keeper; its events are held until `begin()` (then from the next turn). */
function wrapChild(child: KeptProcess, tty: boolean, events: ChildEvents): { child: SpawnedChild; begin(): void } {
  let begun = false;
  const held: (() => void)[] = [];
  const whenBegun = (event: () => void) => (begun ? event() : held.push(event));
  const stdoutName: OutputStream = tty ? 'pty' : 'stdout';
  child.onOutput((stream, data) => {
    const name: OutputStream = stream === 'stdout' ? stdoutName : 'stderr';
    if (begun) return events.output(name, data);
    const copy = Buffer.from(data); // `data` is only valid now
    held.push(() => events.output(name, copy));
  });
  // Not read until the caller says so (`setReading`): else everything a fast producer writes
  // while its start is confirmed would pile up here, past any window or memory budget.
  child.stdout.pause();
  child.stderr?.pause();
  // A failed output stream (read ECONNRESET on a reused descriptor) fails this process only.
  child.stdout.on('error', (err) => whenBegun(() => events.streamError(stdoutName, err)));
  child.stderr?.on('error', (err) => whenBegun(() => events.streamError('stderr', err)));
  child.once('exit', (code, signal) =>
    whenBegun(() => events.exit(code ?? 128 + (signal ? (osConstants.signals[signal] ?? 0) : 0))),
  );
  child.once('close', () => whenBegun(() => events.close()));
  const begin = () =>
    setImmediate(() => {
      begun = true;
      for (const event of held.splice(0)) event();
    });
  const control = child.kept;
  const kept: KeptChild | undefined = control
    ? {
        stdin: child.framedStdin,
        mark: (seq, stream, end) => control.mark(seq, stream, end),
        markEvent: (seq, event) => control.markEvent(seq, event),
        drop: (seq) => control.drop(seq),
        release: () => control.release(),
        handOver: () => control.handOver(),
        socketPath: control.socketPath,
      }
    : undefined;
  const wrapped: SpawnedChild = {
    get pid() {
      return child.pid;
    },
    stdin: child.stdin,
    setReading(reading) {
      for (const s of [child.stdout, child.stderr]) {
        if (!s) continue;
        if (reading) s.resume();
        else s.pause();
      }
    },
    signal: (signal) => void child.kill(signal),
    killTree: () => child.killTree(),
    killTreeSync: (evenKept) => child.killTreeSync(evenKept),
    resize: (cols, rows) => {
      if (tty) child.resize(cols, rows);
    },
    get alive() {
      return child.alive;
    },
    whenGone: child.whenGone,
    kept,
  };
  return { child: wrapped, begin };
}

/**
 * -32603 naming what failed, then the OS message (Codex's text, which is all Codex says):
 *   cannot start 'prog': No such file or directory (os error 2)
 *   cannot start 'prog': cwd '/x/y': No such file or directory (os error 2)
 * The OS says "No such file or directory" for a missing program and a missing working
 * directory alike, so the message says which, and where. The detail of extension
 * `startErrorDetail` (methods.ts drops it for sessions that did not ask) says it for
 * programs: which step failed and its errno name.
 */
function spawnError(err: unknown, spec: Pick<ChildSpec, 'argv' | 'cwd'>): Error {
  const { code, syscall } = err as { code?: unknown; syscall?: unknown };
  const what = `cannot start ${quoted(spec.argv[0] ?? '')}`;
  if (typeof code !== 'string') return internalError(`${what}: ${osErrorMessage(err)}`);
  const stage: StartErrorDetail['stage'] = syscall === 'chdir' ? 'cwd' : typeof syscall === 'string' && syscall.startsWith('spawn') ? 'exec' : 'setup';
  const where = stage === 'cwd' ? `cwd ${quoted(spec.cwd)}: ` : '';
  return new RpcError(ErrorCode.InternalError, `${what}: ${where}${osErrorMessage(err)}`, { stage, code } satisfies StartErrorDetail);
}
