/**
 * Starting a child: pipes (`child_process.spawn`, its own process group) or a real
 * pseudo-terminal (node-pty). This file is the whole of "how a process is run"; what happens
 * to its output (numbering, retention, flow control) is `ManagedProcess`'s business, and it
 * sees every kind of child through the same small `SpawnedChild` surface. (The per-process
 * keeper of issues 11/12 replaces the inside of this file.)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, closeSync, constants as fsConstants, openSync, readFileSync, statSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { Writable, type Readable } from 'node:stream';
import type { IPty } from 'node-pty';
import { internalError } from '../protocol/index.js';
import type { OutputStream } from '../protocol/index.js';
import { osErrorMessage } from './os-error.js';

export interface ChildSpec {
  argv: string[];
  cwd: string;
  env: Record<string, string>;
  tty: boolean;
  pipeStdin: boolean;
  arg0?: string | null;
}

/** What a running child tells its owner, in this order per stream: output…, then exit/close. */
export interface ChildEvents {
  output(stream: OutputStream, data: Buffer): void;
  /** The process ended (its own status, or 128+N for signal N); output may still follow. */
  exit(rawExitCode: number): void;
  /** The process ended and its output reached end of file: nothing more will come. */
  close(): void;
  /** An output stream failed; the child can no longer be followed faithfully. */
  streamError(stream: OutputStream, error: Error): void;
}

export interface SpawnedChild {
  readonly pid: number;
  /** Its input: a pipe, or the terminal (a pty has no end of file: never end() it). Null without one. */
  readonly stdin: Writable | null;
  /** Stop (false) or restart (true) reading its output: a stopped child blocks on write. */
  setReading(reading: boolean): void;
}

/** Spawns the child; rejects with -32603 and the OS message if it cannot start (nothing is left behind). */
export function spawnChild(spec: ChildSpec, events: ChildEvents): Promise<SpawnedChild> {
  return spec.tty ? spawnPty(spec, events) : spawnPipes(spec, events);
}

async function spawnPipes(spec: ChildSpec, events: ChildEvents): Promise<SpawnedChild> {
  const [file, ...args] = spec.argv as [string, ...string[]];
  let child: ChildProcess;
  try {
    child = spawn(file, args, {
      cwd: spec.cwd,
      env: spec.env,
      // Own process group (setsid): expiry and terminate kill `-pid`, reaching grandchildren too.
      detached: true,
      stdio: [spec.pipeStdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
      argv0: spec.arg0 ?? undefined,
      windowsHide: true,
    });
  } catch (err) {
    throw spawnError(err);
  }
  if (child.pid === undefined) {
    // libuv reports exec failures (ENOENT binary or cwd, EACCES) asynchronously.
    const err = await new Promise<unknown>((resolve) => child.once('error', resolve));
    throw spawnError(err);
  }
  child.on('error', () => {
    /* kill() on an already-reaped child; the exit path covers it */
  });
  const stdout = child.stdout as Readable;
  const stderr = child.stderr as Readable;
  stdout.on('data', (buf: Buffer) => events.output('stdout', buf));
  stderr.on('data', (buf: Buffer) => events.output('stderr', buf));
  child.once('exit', (code, signal) => events.exit(code ?? 128 + (signal ? (osConstants.signals[signal] ?? 0) : 0)));
  child.once('close', () => events.close());
  return {
    pid: child.pid,
    stdin: child.stdin ?? null,
    setReading(reading) {
      for (const s of [stdout, stderr]) {
        if (reading) s.resume();
        else s.pause();
      }
    },
  };
}

let ptyModule: typeof import('node-pty') | undefined;
async function loadPty(): Promise<typeof import('node-pty')> {
  ptyModule ??= await import('node-pty');
  return ptyModule;
}

async function spawnPty(spec: ChildSpec, events: ChildEvents): Promise<SpawnedChild> {
  const [file, ...args] = spec.argv as [string, ...string[]];
  // node-pty reports exec failures as an exiting child; check first so the caller gets -32603.
  checkExecutable(file, spec.cwd, spec.env.PATH);
  const pty = await loadPty();
  let term: IPty;
  try {
    term = pty.spawn(file, args, {
      name: spec.env.TERM ?? 'xterm-256color',
      cols: 80,
      rows: 24,
      cwd: spec.cwd,
      env: spec.env,
      encoding: null, // raw bytes, never re-encoded
    });
  } catch (err) {
    throw spawnError(err);
  }
  const pid = term.pid;
  const held = holdTerminal(pid, (term as unknown as { ptsName?: string }).ptsName);
  term.onData((data: string | Buffer) => events.output('pty', typeof data === 'string' ? Buffer.from(data) : data));
  // node-pty emits exit only after the pty reached EOF, so exit and close coincide.
  term.onExit(({ exitCode, signal }) => {
    held?.release();
    events.exit(signal ? 128 + signal : exitCode);
    events.close();
  });
  return {
    pid,
    stdin: new Writable({
      write(chunk: Buffer, _encoding, callback) {
        if (chunk.length > 0) term.write(chunk as unknown as string);
        callback();
      },
    }),
    setReading(reading) {
      if (reading) term.resume();
      else term.pause();
    },
  };
}

/**
 * A program that closes its terminal before it exits (GNU cat, daemons, `exec >&-`) would
 * make node-pty see EOF and close the master, and the kernel would SIGHUP the still-running
 * child (exit 129 where Codex reports the program's own code). Like a terminal emulator, the
 * server keeps the terminal open — it holds a slave fd (O_NOCTTY: never its own controlling
 * terminal) — until the child is gone, which SIGCHLD tells.
 */
const heldTerminals = new Map<number, number>();

function holdTerminal(pid: number, ptsName: string | undefined): { release(): void } | null {
  if (!ptsName) return null;
  let fd: number;
  try {
    fd = openSync(ptsName, fsConstants.O_RDWR | fsConstants.O_NOCTTY);
  } catch {
    return null; // best effort: without it only the early-close case differs
  }
  if (heldTerminals.size === 0) process.on('SIGCHLD', onChildSignal);
  heldTerminals.set(pid, fd);
  return { release: () => releaseTerminal(pid) };
}

function releaseTerminal(pid: number): void {
  const fd = heldTerminals.get(pid);
  if (fd === undefined) return;
  heldTerminals.delete(pid);
  if (heldTerminals.size === 0) process.off('SIGCHLD', onChildSignal);
  try {
    closeSync(fd);
  } catch {
    /* already closed */
  }
}

function onChildSignal(): void {
  for (const pid of [...heldTerminals.keys()]) if (!isRunning(pid)) releaseTerminal(pid);
}

/** False once the process is a zombie or reaped. */
function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    return stat.charAt(stat.lastIndexOf(')') + 2) !== 'Z';
  } catch (err) {
    if ((err as { code?: string }).code !== 'ENOENT') {
      try {
        process.kill(pid, 0); // no /proc (not Linux): reaped means gone
        return true;
      } catch {
        return false;
      }
    }
    return false;
  }
}

function spawnError(err: unknown): Error {
  return internalError(osErrorMessage(err));
}

/** For the PTY path: the program must resolve to an executable and cwd must be a directory. */
function checkExecutable(file: string, cwd: string, pathVar: string | undefined): void {
  const fail = (code: string) => {
    throw internalError(osErrorMessage(Object.assign(new Error(code), { code })));
  };
  let isDir = false;
  try {
    isDir = statSync(cwd).isDirectory();
  } catch (err) {
    fail((err as { code?: string }).code ?? 'ENOENT');
  }
  if (!isDir) fail('ENOTDIR');
  const candidates = file.includes('/') ? [resolve(cwd, file)] : (pathVar ?? '/usr/bin:/bin').split(delimiter).filter(Boolean).map((d) => join(d, file));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, fsConstants.X_OK);
      if (statSync(candidate).isFile()) return;
    } catch {
      /* next */
    }
  }
  fail('ENOENT');
}
