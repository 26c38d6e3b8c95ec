/**
 * One child process of a session: spawns it (pipes or a real PTY), numbers its events with
 * one sequence counter (output, exited, closed — closed last), keeps its recent output for
 * `process/read`, and stops reading its pipes when nobody could take more output
 * (connection backpressure, or retention full of output no client has seen yet).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, closeSync, constants as fsConstants, openSync, readFileSync, statSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import type { IPty } from 'node-pty';
import { internalError } from '../protocol/index.js';
import type { OutputStream, ProcessReadResult, SignalName, WriteStatus } from '../protocol/index.js';
import { osErrorMessage } from './os-error.js';

/** Where a process sends its events: its session, which forwards them to the attached connection. */
export interface ProcessHost {
  /** True while no connection can take output fast enough (ws.bufferedAmount above the high-water mark). */
  readonly backpressured: boolean;
  /**
   * Sends `process/output` if a connection is attached (returns false if none is).
   * `onWritten(ok)` runs once the frame was handed to the kernel (ok) or the socket died
   * first (not ok): only then does the chunk count as delivered.
   */
  sendOutput(processId: string, seq: number, stream: OutputStream, chunk: string, onWritten: (ok: boolean) => void): boolean;
  sendNotification(method: string, params: object): void;
  processClosed(proc: ManagedProcess): void;
}

export interface SpawnSpec {
  processId: string;
  argv: string[];
  cwd: string;
  env: Record<string, string>;
  tty: boolean;
  pipeStdin: boolean;
  arg0?: string | null;
  retentionBytes: number;
}

interface RetainedChunk {
  seq: number;
  stream: OutputStream;
  /** base64, encoded once on arrival and reused by the notification and every read */
  chunk: string;
  bytes: number;
  state: ChunkState;
}

/**
 * unsent: no connection took it (detached, or its socket died before writing it) — never
 * evicted, and a retention full of these pauses the child; inflight: queued on a socket —
 * not evicted either (the socket may still die), bounded by the backpressure marks;
 * delivered: written to the kernel or read back by `process/read` — evictable.
 */
const enum ChunkState {
  Unsent,
  Inflight,
  Delivered,
}

const SIGNALS: Record<SignalName, NodeJS.Signals> = {
  interrupt: 'SIGINT',
  terminate: 'SIGTERM',
  kill: 'SIGKILL',
  hangup: 'SIGHUP',
  quit: 'SIGQUIT',
  user1: 'SIGUSR1',
  user2: 'SIGUSR2',
};

/** A process that exited with its pipes still open (a grandchild holds them) reports its exit after this. */
const EXIT_WITHOUT_EOF_GRACE_MS = 20;
/** Remembered writeIds per process (PROTOCOL.md: at least 4096). */
const WRITE_ID_MEMORY = 4096;

let ptyModule: typeof import('node-pty') | undefined;
async function loadPty(): Promise<typeof import('node-pty')> {
  ptyModule ??= await import('node-pty');
  return ptyModule;
}

export class ManagedProcess {
  readonly id: string;
  readonly tty: boolean;
  pid = 0;
  private child: ChildProcess | null = null;
  private pty: IPty | null = null;
  private stdin: Writable | null = null;
  private stdinOpen = false;

  private nextSeq = 1;
  private chunks: RetainedChunk[] = [];
  private head = 0;
  private retainedBytes = 0;
  private totalBytes = 0;
  private unsentBytes = 0;
  private readonly retentionBytes: number;

  exitCode: number | null = null;
  private exitSeq: number | null = null;
  private rawExitCode: number | null = null;
  closed = false;
  private exitTimer: NodeJS.Timeout | null = null;

  private paused = false;
  private released = false;
  private resolveClosed!: () => void;
  /** Resolves once the process has exited and its output reached end of file. */
  readonly whenClosed = new Promise<void>((resolve) => (this.resolveClosed = resolve));
  private waiters = new Set<() => void>();
  private writeIds = new Set<string>();

  private constructor(
    spec: SpawnSpec,
    private readonly host: ProcessHost,
  ) {
    this.id = spec.processId;
    this.tty = spec.tty;
    this.retentionBytes = spec.retentionBytes;
  }

  /** Spawns the child; rejects with -32603 and the OS message if it cannot start (nothing is left behind). */
  static async start(spec: SpawnSpec, host: ProcessHost): Promise<ManagedProcess> {
    const proc = new ManagedProcess(spec, host);
    if (spec.tty) await proc.spawnPty(spec);
    else await proc.spawnPipes(spec);
    return proc;
  }

  private async spawnPipes(spec: SpawnSpec): Promise<void> {
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
    this.child = child;
    this.pid = child.pid;
    child.on('error', () => {
      /* kill() on an already-reaped child; the exit path covers it */
    });
    if (child.stdin) {
      this.stdin = child.stdin;
      this.stdinOpen = true;
      child.stdin.on('error', () => (this.stdinOpen = false));
      child.stdin.on('close', () => (this.stdinOpen = false));
    }
    const stdout = child.stdout as Readable;
    const stderr = child.stderr as Readable;
    stdout.on('data', (buf: Buffer) => this.onOutput('stdout', buf));
    stderr.on('data', (buf: Buffer) => this.onOutput('stderr', buf));
    child.once('exit', (code, signal) => {
      this.rawExitCode = code ?? 128 + (signal ? (osConstants.signals[signal] ?? 0) : 0);
      // Report the exit once the pipes are drained ('close'), so output usually precedes it;
      // do not hold it back forever when a grandchild keeps the pipes open.
      this.exitTimer = setTimeout(() => this.recordExit(), EXIT_WITHOUT_EOF_GRACE_MS);
    });
    child.once('close', () => {
      this.recordExit();
      this.recordClosed();
    });
  }

  private async spawnPty(spec: SpawnSpec): Promise<void> {
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
        encoding: null, // raw bytes: base64 them as they come, never re-encode
      });
    } catch (err) {
      throw spawnError(err);
    }
    this.pty = term;
    this.pid = term.pid;
    this.stdinOpen = true;
    holdTerminal(this, (term as unknown as { ptsName?: string }).ptsName);
    term.onData((data: string | Buffer) => this.onOutput('pty', typeof data === 'string' ? Buffer.from(data) : data));
    // node-pty emits exit only after the pty reached EOF, so exit and close coincide.
    term.onExit(({ exitCode, signal }) => {
      releaseTerminal(this);
      this.stdinOpen = false;
      this.rawExitCode = signal ? 128 + signal : exitCode;
      this.recordExit();
      this.recordClosed();
    });
  }

  private onOutput(stream: OutputStream, buf: Buffer): void {
    if (this.released) return;
    this.totalBytes += buf.length;
    const seq = this.nextSeq++;
    const chunk: RetainedChunk = { seq, stream, chunk: buf.toString('base64'), bytes: buf.length, state: ChunkState.Inflight };
    this.chunks.push(chunk);
    this.retainedBytes += chunk.bytes;
    if (!this.host.sendOutput(this.id, seq, stream, chunk.chunk, (ok) => this.onWritten(chunk, ok))) {
      chunk.state = ChunkState.Unsent;
      this.unsentBytes += chunk.bytes;
    }
    this.trim();
    this.updateFlow();
    this.wake();
  }

  private onWritten(chunk: RetainedChunk, ok: boolean): void {
    if (chunk.state !== ChunkState.Inflight) return; // already read back
    if (ok) {
      chunk.state = ChunkState.Delivered;
      this.trim();
    } else {
      // The socket died with it queued: the client never got it; keep it for the replay.
      chunk.state = ChunkState.Unsent;
      this.unsentBytes += chunk.bytes;
      this.updateFlow();
    }
  }

  /** Evicts the oldest output beyond retention, but never output a client may not have received. */
  private trim(): void {
    const chunks = this.chunks;
    while (this.retainedBytes > this.retentionBytes && this.head < chunks.length) {
      const oldest = chunks[this.head]!;
      if (oldest.state !== ChunkState.Delivered) break;
      this.retainedBytes -= oldest.bytes;
      oldest.chunk = ''; // free the payload now; the slot itself goes at the next compaction
      this.head++;
    }
    if (this.head > 1024 && this.head * 2 > chunks.length) {
      this.chunks = chunks.slice(this.head);
      this.head = 0;
    }
  }

  /**
   * Reading pauses while the connection is backed up, or while retention is full of output
   * nobody has received yet (detached, or just resumed and not read back): the child then
   * blocks on write instead of its output being dropped.
   */
  updateFlow(): void {
    const shouldPause =
      !this.closed && !this.released && (this.host.backpressured || (this.unsentBytes > 0 && this.retainedBytes >= this.retentionBytes));
    if (shouldPause === this.paused) return;
    this.paused = shouldPause;
    if (this.pty) {
      if (shouldPause) this.pty.pause();
      else this.pty.resume();
    } else if (this.child) {
      for (const s of [this.child.stdout, this.child.stderr]) {
        if (!s) continue;
        if (shouldPause) s.pause();
        else s.resume();
      }
    }
  }

  private recordExit(): void {
    if (this.exitTimer) {
      clearTimeout(this.exitTimer);
      this.exitTimer = null;
    }
    if (this.exitSeq !== null || this.rawExitCode === null) return;
    this.exitCode = this.rawExitCode;
    this.exitSeq = this.nextSeq++;
    this.stdinOpen = false;
    this.host.sendNotification('process/exited', {
      processId: this.id,
      seq: this.exitSeq,
      exitCode: this.exitCode,
      sandboxDenied: false,
    });
    this.wake();
  }

  private recordClosed(): void {
    if (this.closed) return;
    this.closed = true;
    this.resolveClosed();
    const seq = this.nextSeq++;
    this.host.sendNotification('process/closed', { processId: this.id, seq });
    this.wake();
    this.host.processClosed(this);
  }

  private wake(): void {
    if (this.waiters.size === 0) return;
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const w of waiters) w();
  }

  private hasNewsAfter(afterSeq: number): boolean {
    const last = this.chunks.length > this.head ? this.chunks[this.chunks.length - 1]!.seq : 0;
    return last > afterSeq || this.closed || this.released || (this.exitSeq !== null && this.exitSeq > afterSeq);
  }

  /** Resolves once there is something new after `afterSeq`, after `waitMs`, or when `signal` aborts (the asking connection closed). */
  async waitForNews(afterSeq: number, waitMs: number, signal?: AbortSignal): Promise<void> {
    if (waitMs <= 0 || signal?.aborted || this.hasNewsAfter(afterSeq)) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(check);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const check = () => {
        if (this.hasNewsAfter(afterSeq)) done();
        else this.waiters.add(check);
      };
      const timer = setTimeout(done, waitMs);
      signal?.addEventListener('abort', done, { once: true });
      this.waiters.add(check);
    });
  }

  /**
   * The process is being removed (session expired, server shutting down): wake every
   * long-poll, and drain its pipes without keeping anything, so a paused child still
   * reaches EOF and nothing accumulates.
   */
  release(): void {
    this.released = true;
    this.wake();
    this.updateFlow();
  }

  read(afterSeq: number, maxBytes: number | null): ProcessReadResult {
    const chunks = this.chunks;
    // First retained chunk with seq > afterSeq (seqs ascend; binary search).
    let lo = this.head;
    let hi = chunks.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (chunks[mid]!.seq <= afterSeq) lo = mid + 1;
      else hi = mid;
    }
    const out: { seq: number; stream: OutputStream; chunk: string }[] = [];
    let bytes = 0;
    for (let i = lo; i < chunks.length; i++) {
      const c = chunks[i]!;
      if (maxBytes !== null && out.length > 0 && bytes + c.bytes > maxBytes) break;
      out.push({ seq: c.seq, stream: c.stream, chunk: c.chunk });
      bytes += c.bytes;
      if (maxBytes !== null && bytes >= maxBytes) break;
    }
    const lastReturned = out.length ? out[out.length - 1]!.seq : afterSeq;
    // The client now holds everything up to here: it may be evicted, and paused pipes resume.
    this.acknowledge(Math.max(afterSeq, lastReturned));
    const nextSeq = maxBytes !== null && out.length > 0 ? lastReturned + 1 : this.nextSeq;
    return {
      chunks: out,
      nextSeq,
      exited: this.exitSeq !== null,
      exitCode: this.exitCode,
      closed: this.closed,
      failure: null,
      sandboxDenied: false,
    };
  }

  /**
   * The client resumed but did not read this backlog back in time (a client that does not
   * care about a process's output): stop protecting it, so the child runs again and the
   * oldest output is evicted as usual.
   */
  releaseBacklog(): void {
    if (this.unsentBytes === 0) return;
    this.acknowledge(Number.MAX_SAFE_INTEGER);
  }

  private acknowledge(uptoSeq: number): void {
    for (let i = this.head; i < this.chunks.length; i++) {
      const c = this.chunks[i]!;
      if (c.seq > uptoSeq) break;
      if (c.state === ChunkState.Unsent) this.unsentBytes -= c.bytes;
      c.state = ChunkState.Delivered;
    }
    this.trim();
    this.updateFlow();
  }

  /**
   * Writes to stdin. The answer waits while the child's stdin pipe is full (it is not
   * reading), so a client that awaits its writes cannot make the server buffer unbounded input.
   * `closeStdin` (a tether extension; Codex ignores it) ends the pipe after `data`, so a
   * child reading to end of file (`cat`, an MCP server) sees EOF as it would locally. A
   * pty has no end of file to send: there it is ignored (closing it would hang the child up).
   */
  async write(data: Buffer, writeId: string, closeStdin = false): Promise<WriteStatus> {
    if (this.writeIds.has(writeId)) return 'accepted'; // a re-send after a reconnect: already written
    if (!this.stdinOpen || this.exitSeq !== null) return 'stdinClosed';
    this.writeIds.add(writeId);
    if (this.writeIds.size > WRITE_ID_MEMORY * 2) {
      // Forget the oldest half at once (Sets iterate in insertion order).
      let drop = WRITE_ID_MEMORY;
      for (const id of this.writeIds) {
        if (drop-- <= 0) break;
        this.writeIds.delete(id);
      }
    }
    if (this.pty) {
      if (data.length > 0) this.pty.write(data);
      return 'accepted';
    }
    const stdin = this.stdin!;
    if (closeStdin) {
      this.stdinOpen = false;
      stdin.end(data);
      return 'accepted';
    }
    if (data.length === 0) return 'accepted';
    if (!stdin.write(data)) {
      await new Promise<void>((resolve) => {
        const done = () => {
          stdin.off('drain', done);
          stdin.off('close', done);
          resolve();
        };
        stdin.on('drain', done);
        stdin.on('close', done);
      });
    }
    return 'accepted';
  }

  /** Sends `name` to the whole process group. */
  signal(name: SignalName): void {
    if (this.closed) return;
    this.killGroup(SIGNALS[name]);
  }

  /** Kills a running process (exit 137); false if it had already exited. */
  terminate(): boolean {
    if (this.exitSeq !== null || this.rawExitCode !== null) return false;
    this.killGroup('SIGKILL');
    return true;
  }

  /** SIGKILL to the process group, whatever its state: leftovers of an exited leader die too. */
  killGroup(signal: NodeJS.Signals = 'SIGKILL'): void {
    if (!this.pid) return;
    try {
      process.kill(-this.pid, signal);
    } catch {
      // ESRCH: the group is gone already. Fall back to the leader (pty children outside a group).
      try {
        if (!this.closed) process.kill(this.pid, signal);
      } catch {
        /* gone */
      }
    }
  }

  /** Whether its pipes are currently not read (backpressure or full retention). */
  get isPaused(): boolean {
    return this.paused;
  }

  /** Bytes of output read from the child so far. */
  get bytesRead(): number {
    return this.totalBytes;
  }

  /** Bytes of output currently kept for replay. */
  get retained(): number {
    return this.retainedBytes;
  }

  /** Resolves when the child has closed (used by shutdown), or after `timeoutMs`. */
  async waitClosed(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.whenClosed, new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
  }
}

/**
 * A program that closes its terminal before it exits (GNU cat, daemons, `exec >&-`) would
 * make node-pty see EOF and close the master, and the kernel would SIGHUP the still-running
 * child (exit 129 where Codex reports the program's own code). Like a terminal emulator, the
 * server keeps the terminal open — it holds a slave fd (O_NOCTTY: never its own controlling
 * terminal) — until the child is gone, which SIGCHLD tells.
 */
const heldTerminals = new Map<ManagedProcess, number>();

function holdTerminal(proc: ManagedProcess, ptsName: string | undefined): void {
  if (!ptsName) return;
  let fd: number;
  try {
    fd = openSync(ptsName, fsConstants.O_RDWR | fsConstants.O_NOCTTY);
  } catch {
    return; // best effort: without it only the early-close case differs
  }
  if (heldTerminals.size === 0) process.on('SIGCHLD', onChildSignal);
  heldTerminals.set(proc, fd);
}

function releaseTerminal(proc: ManagedProcess): void {
  const fd = heldTerminals.get(proc);
  if (fd === undefined) return;
  heldTerminals.delete(proc);
  if (heldTerminals.size === 0) process.off('SIGCHLD', onChildSignal);
  try {
    closeSync(fd);
  } catch {
    /* already closed */
  }
}

function onChildSignal(): void {
  for (const proc of [...heldTerminals.keys()]) if (!isRunning(proc.pid)) releaseTerminal(proc);
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
