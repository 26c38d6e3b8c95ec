/**
 * A child process as the back-end interface (backend.ts) gives it: what to start
 * (`ChildSpec`), what it tells its owner (`ChildEvents`), the running child (`SpawnedChild`),
 * and, in kept mode (restart adoption: a server with a state dir), its keeper's side
 * (`KeptChild`, `KeptStdin`) and a child a successor server adopted with what its keeper
 * kept (`AdoptedChild`, `KeptDump`). The local back-end implements them (local/spawn.ts,
 * local/keeper/); the numbered output of the process (output/process.ts) sees every kind of
 * child through them. Types only.
 */
import type { Writable } from 'node:stream';
import type { z } from 'zod';
import type { EnvPolicySchema, OutputStream } from '../../protocol/index.js';

export interface ChildSpec {
  argv: string[];
  cwd: string;
  /** The client's `cwd` as sent (a `file:` URI), for a back-end that forwards it. */
  cwdUri?: string;
  /** The client's `env`; with `envPolicy`, the back-end builds the child's environment from its own (local/env.ts). */
  env: Record<string, string>;
  envPolicy?: z.infer<typeof EnvPolicySchema> | null;
  /** The client's process id, for a back-end that forwards it. */
  processId?: string;
  tty: boolean;
  pipeStdin: boolean;
  arg0?: string | null;
  /** The terminal's initial size (tty only; 80x24 when not given). */
  terminalSize?: { cols: number; rows: number } | null;
  /** Kept mode (restart adoption, a server with a state dir): the keeper outlives the server for a successor to adopt. */
  keep?: KeepOptions;
}

/** What a kept keeper needs before its spec: where to listen, how long to wait, what to retain. */
export interface KeepOptions {
  /** How long the keeper waits for an adopter after its server is gone (ms), then kills the tree. */
  adoptMs: number;
  /** The most output bytes (stdout + stderr) the keeper retains; it stops reading the command at that. */
  capBytes: number;
  /** The Unix socket the keeper listens on for an adopter (mode 0600). */
  path: string;
  /** An opaque blob returned verbatim at adoption. */
  meta: Buffer;
}

/** What a running child tells its owner, in this order per stream: output…, then exit/close. */
export interface ChildEvents {
  /** `data` is valid only during the call (a read buffer reused by the next read): copy what is kept. */
  output(stream: OutputStream, data: Buffer): void;
  /** The process ended (its own status, or 128+N for signal N); output may still follow. */
  exit(rawExitCode: number): void;
  /** The process ended and its output reached end of file: nothing more will come. */
  close(): void;
  /** An output stream failed; the child can no longer be followed faithfully. */
  streamError(stream: OutputStream, error: Error): void;
}

/** What starts children: a session's back-end (backend.ts `SessionBackend.spawn`). */
export interface ChildStarter {
  spawn(spec: ChildSpec, events: ChildEvents): Promise<SpawnedChild>;
}

export interface SpawnedChild {
  readonly pid: number;
  /**
   * Its input: a pipe, or the terminal (a pty has no end of file: never end() it). Null
   * without one. A write's callback runs once the child's pipe — or the terminal — took it.
   */
  readonly stdin: Writable | null;
  /** Stop (false) or restart (true) reading its output: a stopped child blocks on write. */
  setReading(reading: boolean): void;
  /** Sends `signal` to the command's process group. */
  signal(signal: NodeJS.Signals): void;
  /** Kills the command and everything it started, whatever its state. */
  killTree(): void;
  /** The same, synchronously (the server process is exiting); a kept keeper only with `evenKept`. */
  killTreeSync(evenKept?: boolean): void;
  /** Sets the terminal's size (tty children; others ignore it). */
  resize(cols: number, rows: number): void;
  /** True while the command or anything it started is alive. */
  readonly alive: boolean;
  /** Resolves when the command and everything it started are gone. */
  readonly whenGone: Promise<void>;
  /** Kept mode (restart adoption): what the keeper is told besides signals, and its framed stdin. */
  readonly kept?: KeptChild;
}

/** A kept keeper's side of a child (local/keeper/): marks, drops, release, hand-over, framed stdin. */
export interface KeptChild {
  /** Stdin as frames answered on `took` (null: the command has no stdin). */
  readonly stdin: KeptStdin | null;
  mark(seq: number, stream: 1 | 2, end: number): void;
  markEvent(seq: number, event: 'x' | 'c'): void;
  drop(seq: number): void;
  /** Done with it for good: the keeper ends as without keep once the tree is gone. */
  release(): void;
  /** Let go of it without killing anything (a kept stop): a successor adopts it. */
  handOver(): void;
  /** The keeper's socket (DIR/k/….sock). */
  readonly socketPath: string;
}

/**
 * A kept child's stdin: each write goes to its keeper as a frame carrying its writeId, and is
 * answered once the keeper took it (local/keeper/kept.ts `FramedStdin`).
 */
export interface KeptStdin {
  /** The command's stdin was closed (eof sent, now or by a predecessor). */
  readonly closed: boolean;
  /** Sends one frame; resolves once the keeper took it (or can take nothing more). */
  write(data: Buffer, writeId: string): Promise<void>;
  /** Closes the command's stdin (after the frames sent before). */
  end(): void;
}

/** A child a successor server adopted from a kept keeper, its events held until `begin` (local/spawn.ts `adoptChild`). */
export interface AdoptedChild {
  readonly child: SpawnedChild;
  /** What its keeper kept, from which the process's log is rebuilt (restart/process-kept.ts). */
  readonly dump: KeptDump;
  /** Where its events go (set once, before `begin`). */
  bind(events: ChildEvents): void;
  begin(): void;
}

/** What a kept keeper retained for its adopter (the local keeper's dump: local/keeper/wire.ts `KeeperDump`). */
export interface KeptDump {
  /** The blob given at the start (`KeepOptions.meta`). */
  readonly meta: Buffer;
  /** The retained bytes of each stream (1: stdout or the terminal, 2: stderr), [base, base + data.length) in the keeper's numbering. */
  readonly streams: { 1: { base: number; data: Buffer }; 2: { base: number; data: Buffer } };
  /** The marks it holds (not dropped), in increasing seq: output up to `end`, or the exit ('x') or close ('c'). */
  readonly marks: readonly { seq: number; stream: 1 | 2 | 'x' | 'c'; end?: number }[];
  /** The command's exit, if it ended. */
  readonly exited: { code: number | null; signal: NodeJS.Signals | null } | null;
  /** The highest seq the server dropped (0: none): a successor numbers on from it even when no mark is left. */
  readonly droppedSeq: number;
  /** The writeIds it took, oldest first. */
  readonly ids: readonly string[];
}
