/**
 * `ExecClient`: one logical client of an exec-server that outlives its connections
 * (docs/protocol.md, "How a client recovers"). States: connected → recovering → connected, or → failed.
 *
 * - Every connection is a numbered generation; only the current one can start a recovery.
 * - While recovering, calls wait; process handles stay open.
 * - Recovery resumes the session, then catches every live process up with `process/read`.
 * - Requests lost with a socket are re-sent: writes with the same `writeId` (the server
 *   dedups), a start whose answer was lost is settled by asking the server about its id.
 * - Failed (session expired, deadline, auth refused, closed) releases every waiter and every
 *   process with one `SessionLostError`.
 */
import { EventEmitter } from 'node:events';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Readable, type Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';
// The protocol's runtime parts one module at a time: the barrel would also load the
// server's zod schemas, which a client never needs (start time of `tether exec`).
import { ErrorCode } from '../protocol/codes.js';
import { RpcError } from '../protocol/errors.js';
import { EXTENSIONS_VERSION, KnownExtensions, type ExtensionName } from '../protocol/extensions.js';
import { decodeBinaryFragments, encodeAckFrame, peekOutputHeader } from '../protocol/binary-frames.js';
import type { ByteArena } from '../util/byte-arena.js';
import {
  Method,
  type EnvironmentInfo,
  type EnvPolicy,
  type InitializeParams,
  type InitializeResult,
  type OutputStream,
  type ProcessReadResult,
  type ProcessStartParams,
  type ProcessStartResult,
  type ProcessTerminateResult,
  type SessionListResult,
  type ProcessWriteResult,
  type SignalName,
} from '../protocol/types.js';
import { reconnectDelayMs } from './backoff.js';
import { Acknowledger } from './acks.js';
import { Connection, type TrustedCa } from './connection.js';
import { ReconnectEngine, type EngineState, type RecoveredEvent, type StateChange } from './engine.js';
import { AuthRefusedError, ConnectionLostError, OutputLostError, SessionLostError, type SessionLostReason } from './errors.js';
import { RemoteFs, type FsHost } from './fs.js';
import { ExecProcess, type ProcessHost } from './process.js';
import { outputEvent } from './sequencer.js';
import type { Logger, LogLevel } from '../util/logger.js';
import { invalidDuration, settleWithin, sleep } from '../util/timeouts.js';

export type ClientState = EngineState;
export type { RecoveredEvent, StateChange } from './engine.js';

export interface ExecClientOptions {
  /** Bearer token for the WebSocket upgrade. */
  token?: string;
  /**
   * For `wss://` servers whose certificate is not signed by a CA Node trusts (a self-signed
   * or private CA): the CA certificate(s), PEM. Node's `NODE_EXTRA_CA_CERTS` works too.
   */
  ca?: TrustedCa;
  /** Sent in `initialize` (default "tether-client"). */
  clientName?: string;
  /** How long a recovery may take, from the drop, before the session counts as lost (25 s). */
  recoveryDeadlineMs?: number;
  /** Client ping period (default: a third of the timeout, at most 5 s). 0 turns the keepalive off. */
  keepaliveIntervalMs?: number;
  /** An unanswered ping older than this means a dead link and starts a recovery (10 s). */
  keepaliveTimeoutMs?: number;
  /** Aborting closes the client (or cancels `connect`). */
  signal?: AbortSignal;
  /** Send `jsonrpc: "2.0"` on every message (default true; both dialects are accepted in). */
  jsonrpc?: boolean;
  /**
   * Flow control against a server without the `acks` extension (a Codex exec-server; with
   * acks every process is flow-controlled on its own and this is not used). Off by default:
   * when a consumed output stream (one with a reader: piped,
   * 'data' listener, iterated) holds more than this many unread bytes, the client stops
   * reading the socket until it drains to half, so a slow consumer slows the remote process
   * (tether pauses its children) instead of growing memory. Streams nobody reads never
   * count. The whole session waits meanwhile, so read every stream you consume.
   */
  outputHighWaterMark?: number;
  /**
   * tether protocol extensions to ask for (default: every one this build knows). The server
   * accepts the ones it knows; a Codex server accepts none, and the client falls back to the
   * Codex dialect. `[]` never asks (the Codex dialect against any server). See `extensions`.
   */
  extensions?: readonly ExtensionName[];
  /** Diagnostics; logs go to the caller (tether's CLIs send them to stderr). */
  logger?: Logger;
}

export interface SpawnOptions {
  /** Working directory: an absolute path, a `file://` URI, or a path relative to the server's cwd. Default: the server's cwd. */
  cwd?: string;
  /** Without `envPolicy`, exactly the child's environment. Default (neither given): the server's core variables (`envPolicy {inherit: "core"}`). */
  env?: Record<string, string>;
  /** Build the environment from the server's own, then lay `env` over it (docs/protocol.md, `process/start`). */
  envPolicy?: EnvPolicy | null;
  /** Run on a pseudo-terminal (all output arrives on `stdout`). */
  tty?: boolean;
  /** Give the process a stdin pipe (default false, as in the protocol; implied by `tty`). */
  pipeStdin?: boolean;
  /** Client-chosen id (default a random UUID); must be unique in the session. */
  processId?: string;
  /** With `tty`: the terminal's initial size (extension `processResize`; 80x24 without it). */
  terminalSize?: { cols: number; rows: number };
  arg0?: string;
  /**
   * Write the process's stdout (all output with `tty`) straight into this stream, like
   * `child_process.spawn`'s `stdio` (e.g. `process.stdout`); `proc.stdout` then stays empty.
   * Output counts as consumed once the write's callback ran: a slow destination slows the
   * remote process. The stream is not ended.
   */
  stdout?: Writable;
  /** The same for stderr. */
  stderr?: Writable;
}

const DEFAULT_DEADLINE_MS = 25_000;
/** The server's window when it does not say (acks batch at a quarter of it). */
const DEFAULT_OUTPUT_WINDOW = 8 * 1024 * 1024;
/** Bytes per process/write (base64 makes the message a third larger). */
const MAX_WRITE_BYTES = 1024 * 1024;
const DEFAULT_KEEPALIVE_TIMEOUT_MS = 10_000;
/** How long a start the server says is still in progress is waited for. */
const STILL_STARTING_MS = 10_000;
/** The first connect's last attempt, made at its deadline, still gets this long. */
const MIN_ATTEMPT_MS = 250;

export class ExecClient extends EventEmitter implements ProcessHost, FsHost {
  /** The server's filesystem in the shape of `node:fs/promises` (fs.ts). */
  readonly fs: RemoteFs;
  private _sessionId = '';
  private nextGeneration = 1;
  private readonly engine: ReconnectEngine<Connection>;
  private readonly processes = new Map<string, ExecProcess>();
  /** Extension `binaryOutput`: the processes by the handle their frames carry (chosen here, sent with process/start). */
  private readonly byHandle = new Map<number, ExecProcess>();
  private nextHandle = 1;
  private readonly acknowledger = new Acknowledger((processId, seq) => this.sendAck(processId, seq), DEFAULT_OUTPUT_WINDOW);
  private readonly filling = new Set<string>();
  private envInfo: EnvironmentInfo | undefined;
  private envInfoPromise: Promise<EnvironmentInfo> | undefined;
  private readonly recoveryDeadlineMs: number;
  private readonly keepaliveTimeoutMs: number;
  private readonly keepaliveIntervalMs: number;
  private readonly clientName: string;
  /** What `initialize` asks for (the same on every resume: the server keeps the set fixed). */
  private readonly extensionRequest: InitializeParams['tether'];
  private _extensions: ReadonlySet<ExtensionName> = new Set();
  /** Terminal sizes on their way, per process (see `resize`). */
  private readonly resizes = new Map<ExecProcess, { pending: { cols: number; rows: number } | null; running: Promise<void> | null }>();
  private closing = false;
  /** Flow control: the current socket is paused because a consumer is behind. */
  private flowPaused = false;
  private flowTimer: NodeJS.Timeout | undefined;

  private constructor(
    readonly url: string,
    private readonly options: ExecClientOptions,
  ) {
    super();
    for (const key of ['recoveryDeadlineMs', 'keepaliveTimeoutMs', 'keepaliveIntervalMs'] as const) {
      const value = options[key];
      const invalid = value === undefined ? null : invalidDuration(value);
      if (invalid) throw new TypeError(`ExecClient.connect: ${key} ${invalid} (got ${String(value)})`);
    }
    if (!/^wss?:\/\//i.test(url)) throw new TypeError(`ExecClient.connect: url must be a ws:// or wss:// URL (got '${url}')`);
    this.recoveryDeadlineMs = options.recoveryDeadlineMs ?? DEFAULT_DEADLINE_MS;
    this.keepaliveTimeoutMs = options.keepaliveTimeoutMs ?? DEFAULT_KEEPALIVE_TIMEOUT_MS;
    this.keepaliveIntervalMs = options.keepaliveIntervalMs ?? Math.min(5000, Math.max(10, Math.floor(this.keepaliveTimeoutMs / 3)));
    this.clientName = options.clientName ?? 'tether-client';
    this.fs = new RemoteFs(this);
    const wanted = options.extensions ?? KnownExtensions;
    this.extensionRequest = wanted.length > 0 ? { version: EXTENSIONS_VERSION, extensions: [...wanted] } : undefined;
    this.engine = new ReconnectEngine<Connection>({
      recoveryDeadlineMs: this.recoveryDeadlineMs,
      resume: (attempt, remainingMs, signal) => this.resume(remainingMs, signal),
      fatal: (err) => (err instanceof AuthRefusedError ? 'auth' : isUnknownSession(err) || err instanceof WrongSessionError ? 'expired' : undefined),
      sessionId: () => this._sessionId,
      logger: options.logger,
    });
    this.engine.on('state', (change) => this.onStateChange(change));
    this.engine.on('recovered', (event) => this.emit('recovered', event));
    this.engine.on('retry', (event) => this.emit('retry', event));
  }

  /** Connects, creates a session and returns the client. Rejects with the transport error, or `SessionLostError('auth')`. */
  static async connect(url: string, options: ExecClientOptions = {}): Promise<ExecClient> {
    const client = new ExecClient(url, options);
    await client.firstConnect();
    return client;
  }

  get state(): ClientState {
    return this.engine.state;
  }

  get generation(): number {
    return this.engine.generation;
  }

  get sessionId(): string {
    return this._sessionId;
  }

  /** The extensions the server accepted for this session (empty against a Codex server). */
  get extensions(): ReadonlySet<ExtensionName> {
    return this._extensions;
  }

  private initializeParams(resumeSessionId?: string): InitializeParams {
    const params: InitializeParams = { clientName: this.clientName };
    if (resumeSessionId !== undefined) params.resumeSessionId = resumeSessionId;
    if (this.extensionRequest) params.tether = this.extensionRequest;
    if (resumeSessionId !== undefined && this.acks) {
      // Where each process stands: the server sends its events from the next one on.
      const delivered: Record<string, number> = {};
      for (const proc of this.processes.values()) if (proc.live) delivered[proc.id] = proc.sequencer.lastDelivered;
      params.tether = { ...this.extensionRequest!, delivered };
    }
    return params;
  }

  /** The session acknowledges output (extension `acks`): per-process flow control, replay on resume. */
  private get acks(): boolean {
    return this._extensions.has('acks');
  }

  private sendAck(processId: string, seq: number): boolean {
    const connection = this.engine.current;
    if (this.engine.state !== 'connected' || !connection?.isOpen) return false;
    const handle = this.processes.get(processId)?.handle ?? 0;
    // A forgotten process (its close re-acknowledged) has no handle any more: JSON then.
    if (handle !== 0) connection.sendBinary(encodeAckFrame(handle, seq));
    else connection.notify(Method.processAck, { processId, seq });
    return true;
  }

  /** Processes this client still follows. */
  get liveProcesses(): ExecProcess[] {
    return [...this.processes.values()].filter((p) => p.live);
  }

  /**
   * Any exec-server method. Waits while recovering and re-sends if the connection dies before
   * the answer (the protocol's methods are idempotent or made so; `process/start` is settled
   * by asking the server, as `spawn` does).
   */
  async request<T = unknown>(method: string, params: object = {}): Promise<T> {
    if (method === Method.processStart) {
      const p = params as ProcessStartParams;
      await this.startOnServer(p, () => {});
      return { processId: p.processId, sandboxType: 'none' } as T;
    }
    return this.call<T>(method, params);
  }

  /**
   * @internal (FsHost) One attempt on the current connection, waiting while recovering; a lost
   * answer rejects with ConnectionLostError instead of being re-sent (the caller decides).
   */
  async requestOnce<T>(method: string, params: object): Promise<T> {
    const connection = await this.ready();
    return connection.request<T>(method, params);
  }

  /** @internal (FsHost) */
  onRecovered(listener: () => void): void {
    this.on('recovered', listener);
  }

  /** @internal (FsHost) */
  onMissingChanged(listener: (watchId: number) => void): void {
    this.on('fs/missingChanged', listener);
  }

  /** The server's `environment/info` (from `initialize` when it sent it). */
  environmentInfo(): Promise<EnvironmentInfo> {
    if (this.envInfo) return Promise.resolve(this.envInfo);
    this.envInfoPromise ??= this.call<EnvironmentInfo>(Method.environmentInfo, {}).then(
      (info) => (this.envInfo = info),
      (err) => {
        this.envInfoPromise = undefined;
        throw err;
      },
    );
    return this.envInfoPromise;
  }

  /**
   * The sessions of this client's token and their processes (every session with the
   * server's admin token): extension `sessionList`. Rejects when the server did not accept
   * it (a Codex exec-server, an older tether).
   */
  async listSessions(): Promise<SessionListResult> {
    if (!this._extensions.has('sessionList')) {
      throw new Error('this server cannot list sessions (extension sessionList not accepted: a Codex exec-server or an older tether)');
    }
    return this.call<SessionListResult>(Method.sessionList, {});
  }

  /** Starts `argv` on the server. The handle is usable at once; 'spawn' fires when the server confirmed. */
  spawn(argv: string[], options: SpawnOptions = {}): ExecProcess {
    if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== 'string')) {
      throw new TypeError('spawn: argv must be a non-empty array of strings');
    }
    const processId = options.processId ?? randomUUID();
    if (this.processes.has(processId)) throw new Error(`spawn: process id ${processId} is already in use by this client`);
    const tty = options.tty ?? false;
    const proc = new ExecProcess(
      processId,
      argv,
      { tty, pipeStdin: options.pipeStdin ?? false, stdoutSink: options.stdout, stderrSink: options.stderr },
      this,
    );
    // Register before sending: output may arrive before the start answer.
    this.processes.set(processId, proc);
    if (this._extensions.has('binaryOutput')) {
      // Chosen here, so frames that overtake (or outlive) the start answer still find their process.
      proc.handle = this.nextHandle++;
      this.byHandle.set(proc.handle, proc);
    }
    proc.once('close', () => this.forget(proc));
    proc.closed.catch(() => this.forget(proc));
    if (this.engine.failure) {
      proc.fail(this.engine.failure);
      return proc;
    }
    void this.spawnOnServer(proc, argv, options);
    return proc;
  }

  /** Kills every live process (bounded wait), then closes the session's socket. */
  async close(): Promise<void> {
    if (this.closing || this.engine.state === 'failed') return;
    this.closing = true;
    const connection = this.engine.current;
    if (this.engine.state === 'connected' && connection?.isOpen) {
      // Kill what still runs and give the exits a moment to arrive, so handles end with
      // their real status (137) rather than SessionLostError('closed').
      const live = this.liveProcesses.filter((p) => p.started);
      const kills = live.map((p) =>
        connection.request(Method.processTerminate, { processId: p.id }).then(() => p.closed),
      );
      await settleWithin(Promise.allSettled(kills), 2000);
      // End the session now rather than leaving it detached for its TTL (it would hold a
      // --max-sessions slot and whatever its processes left behind). Best effort: a lost
      // answer leaves the server's TTL to do the same later.
      if (this._extensions.has('sessionClose') && connection.isOpen) {
        await settleWithin(connection.request(Method.sessionClose, {}), 2000);
      }
    }
    this.fail('closed');
    connection?.close();
  }

  // ---- ProcessHost ----------------------------------------------------------------------

  /** @internal */
  async writeStdin(proc: ExecProcess, data: Buffer): Promise<void> {
    // Servers cap message sizes (tether: 16 MiB): send big writes as ordered pieces, each
    // its own logical write with its own writeId.
    let offset = 0;
    do {
      const piece = data.subarray(offset, offset + MAX_WRITE_BYTES);
      await this.write(proc, { processId: proc.id, chunk: piece.toString('base64'), writeId: randomUUID() });
      offset += MAX_WRITE_BYTES;
    } while (offset < data.length);
  }

  /**
   * @internal The protocol has no way to close a child's stdin; tether servers accept
   * `closeStdin: true` on `process/write` as an extension (Codex ignores the member and
   * writes nothing, so this is harmless there).
   */
  async closeStdin(proc: ExecProcess): Promise<void> {
    // A pty has no separate stdin to close (closing its master hangs the session up); on a
    // terminal, end of input is the program's business (^D), so ending a tty's stdin is a no-op.
    if (!proc.live || proc.tty) return;
    await this.write(proc, { processId: proc.id, chunk: '', writeId: randomUUID(), closeStdin: true }).catch(() => {});
  }

  /** @internal Signals are re-sent after a lost answer only while the process is still running. */
  async signal(proc: ExecProcess, signal: SignalName): Promise<void> {
    await proc.startedPromise;
    for (;;) {
      if (proc.sequencer.exitSeen || !proc.live) return;
      const connection = await this.ready();
      try {
        await connection.request(Method.processSignal, { processId: proc.id, signal });
        return;
      } catch (err) {
        if (!(err instanceof ConnectionLostError)) throw err;
      }
    }
  }

  /** @internal A terminate whose answer was lost is not re-sent if the process exited meanwhile (137 = ours). */
  async terminate(proc: ExecProcess): Promise<boolean> {
    await proc.startedPromise.catch(() => {});
    if (!proc.started) return false;
    let lostOnce = false;
    for (;;) {
      if (proc.sequencer.exitSeen || !proc.live) return lostOnce && proc.exitCode === 137;
      const connection = await this.ready();
      try {
        const result = await connection.request<ProcessTerminateResult>(Method.processTerminate, { processId: proc.id });
        return result.running || (lostOnce && proc.exitCode === 137);
      } catch (err) {
        if (!(err instanceof ConnectionLostError)) throw err;
        lostOnce = true;
      }
    }
  }

  /**
   * @internal One resize in flight per process; a newer size waits and replaces any older
   * waiting one, so sizes arrive in order and a burst of SIGWINCH costs two requests.
   */
  async resize(proc: ExecProcess, cols: number, rows: number): Promise<boolean> {
    if (!this._extensions.has('processResize')) return false;
    const state = this.resizes.get(proc) ?? { pending: null, running: null };
    this.resizes.set(proc, state);
    state.pending = { cols, rows };
    state.running ??= (async () => {
      try {
        await proc.startedPromise;
        while (state.pending) {
          const size = state.pending;
          state.pending = null;
          if (!proc.live || proc.sequencer.exitSeen) break;
          await this.call(Method.processResize, { processId: proc.id, ...size });
        }
      } finally {
        state.running = null;
        this.resizes.delete(proc);
      }
    })();
    await state.running;
    return true;
  }

  /** @internal Nobody can follow this process any more: terminate it (best effort) rather than leak it. */
  abandon(proc: ExecProcess): void {
    if (!proc.started || proc.sequencer.exitSeen) return;
    this.call(Method.processTerminate, { processId: proc.id }).catch(() => {});
  }

  /** @internal `acks`: tell the server how far the consumer got. */
  consumed(proc: ExecProcess, seq: number, bytes: number, final: boolean): void {
    if (this.acks) this.acknowledger.consumed(proc.id, seq, bytes, final);
  }

  /** @internal */
  outputBuffered(stream: Readable | Writable): void {
    const limit = this.options.outputHighWaterMark;
    if (limit === undefined || this.flowPaused || this.acks) return;
    if (!isBehind(stream, limit)) return;
    this.flowPaused = true;
    this.engine.current?.pause();
    // A Readable calls read() once per shortfall, not on every chunk taken, so also look
    // now and then: consumers drain at their own pace.
    this.flowTimer = setInterval(() => this.outputWanted(), 20);
    this.flowTimer.unref();
    this.emit('flow', { paused: true });
  }

  /** @internal A consumer wants more: resume once every consumed stream is down to half the mark. */
  outputWanted(): void {
    if (!this.flowPaused) return;
    const low = (this.options.outputHighWaterMark ?? 0) / 2;
    for (const proc of this.processes.values()) {
      for (const stream of proc.outputStreams) if (isBehind(stream, low)) return;
    }
    this.flowPaused = false;
    clearInterval(this.flowTimer);
    this.engine.current?.resume();
    this.emit('flow', { paused: false });
  }

  /** @internal Single flight per process: read what the notifications skipped. */
  fillHole(proc: ExecProcess): void {
    if (this.filling.has(proc.id) || !proc.started) return;
    this.filling.add(proc.id);
    const afterSeq = proc.sequencer.lastDelivered;
    this.call<ProcessReadResult>(Method.processRead, { processId: proc.id, afterSeq })
      .then((result) => proc.mergeRead(afterSeq, result))
      .catch((err) => {
        if (isUnknownProcess(err)) proc.fail(new OutputLostError(proc.id, afterSeq + 1, Infinity, 'could not be read: the server no longer knows the process'));
      })
      .finally(() => {
        this.filling.delete(proc.id);
        if (proc.live && proc.sequencer.hasHole) this.fillHole(proc);
      });
  }

  // ---- requests ---------------------------------------------------------------------------

  /** The current connection, waiting while recovering; rejects once failed. */
  private ready(): Promise<Connection> {
    return this.engine.ready();
  }

  /** A request that is re-sent, unchanged, on the next connection if its socket dies. */
  private async call<T>(method: string, params: object): Promise<T> {
    for (;;) {
      const connection = await this.ready();
      try {
        return await connection.request<T>(method, params);
      } catch (err) {
        if (!(err instanceof ConnectionLostError)) throw err;
      }
    }
  }

  private async write(proc: ExecProcess, params: { processId: string; chunk: string; writeId: string; closeStdin?: boolean }): Promise<void> {
    await proc.startedPromise;
    for (let starting = 0; ; starting++) {
      if (!proc.live) throw new Error(`process ${proc.id} has closed; its stdin cannot be written`);
      // Same params (same writeId) on every try: the server writes a repeated id only once.
      const { status } = await this.call<ProcessWriteResult>(Method.processWrite, params);
      switch (status) {
        case 'accepted':
          return;
        case 'starting':
          await sleep(Math.min(100, 5 * 2 ** Math.min(starting, 5)));
          continue;
        case 'stdinClosed':
          throw Object.assign(new Error(`stdin of process ${proc.id} is closed`), { code: 'EPIPE' });
        case 'unknownProcess':
          throw Object.assign(new Error(`process ${proc.id} is unknown to the server`), { code: 'EPIPE' });
        default:
          throw new Error(`process/write answered an unknown status ${JSON.stringify(status)}`);
      }
    }
  }

  private async spawnOnServer(proc: ExecProcess, argv: string[], options: SpawnOptions): Promise<void> {
    try {
      const cwd = await this.resolveCwd(options.cwd);
      const useDefaultEnv = options.env === undefined && options.envPolicy === undefined;
      const params: ProcessStartParams = {
        processId: proc.id,
        argv,
        cwd,
        env: options.env ?? {},
        tty: options.tty ?? false,
        pipeStdin: options.pipeStdin ?? false,
      };
      if (useDefaultEnv) params.envPolicy = fullEnvPolicy({ inherit: 'core' });
      else if (options.envPolicy) params.envPolicy = fullEnvPolicy(options.envPolicy);
      if (options.arg0 !== undefined) params.arg0 = options.arg0;
      if (options.tty && options.terminalSize && this._extensions.has('processResize')) params.terminalSize = options.terminalSize;
      if (proc.handle !== 0) params.handle = proc.handle;
      await this.startOnServer(
        params,
        (read) => {
          proc.markStarted();
          proc.mergeRead(0, read);
        },
        () => proc.sequencer.lastDelivered > 0 || !proc.live,
      );
      proc.markStarted();
    } catch (err) {
      proc.fail(err as Error);
    }
  }

  /**
   * `process/start`, exactly once. If the socket dies before the answer, the start may or may
   * not have happened: ask the server about the (client-chosen) id. Known → adopt it (and
   * hand its output so far to `adopt`); unknown → start it. A duplicate-id answer after a lost
   * attempt means our own earlier start landed: adopt too. Never started twice, never leaked.
   * `seen`: events of the process already arrived (with acks the server replays them on the
   * resume, and may have forgotten the process once its close was acknowledged): it exists.
   */
  private async startOnServer(params: ProcessStartParams, adopt: (read: ProcessReadResult) => void, seen: () => boolean = () => false): Promise<void> {
    let uncertain = false;
    let startingSince: number | undefined;
    for (;;) {
      const connection = await this.ready();
      try {
        if (uncertain && seen()) {
          this.log('info', `process ${params.processId}: start answer lost, the server has the process: adopted (its events arrived)`);
          return;
        }
        if (uncertain) {
          try {
            const read = await connection.request<ProcessReadResult>(Method.processRead, { processId: params.processId, afterSeq: 0 });
            this.log('info', `process ${params.processId}: start answer lost, the server has the process: adopted`);
            adopt(read);
            return;
          } catch (err) {
            // Codex answers "process id … is starting" while that start is still in progress:
            // ask again (for a while: a start that never ends is the server's failure to report).
            if (isStarting(err) && (startingSince ??= Date.now()) > Date.now() - STILL_STARTING_MS) {
              await sleep(20);
              continue;
            }
            if (!isUnknownProcess(err)) throw err;
            this.log('info', `process ${params.processId}: start answer lost, the server does not have the process: starting it`);
          }
        }
        await connection.request<ProcessStartResult>(Method.processStart, params);
        return;
      } catch (err) {
        if (err instanceof ConnectionLostError) {
          uncertain = true;
          continue;
        }
        if (uncertain && isDuplicateProcess(err)) continue; // ours landed earlier: the read adopts it
        throw err;
      }
    }
  }

  private async resolveCwd(cwd: string | undefined): Promise<string> {
    if (cwd !== undefined && cwd.startsWith('file://')) return cwd;
    if (cwd !== undefined && cwd.startsWith('/')) return pathToFileURL(cwd).href;
    const info = await this.environmentInfo();
    if (cwd === undefined || cwd === '' || cwd === '.') return info.cwd;
    const base = info.cwd.endsWith('/') ? info.cwd : `${info.cwd}/`;
    return new URL(cwd.split('/').map(encodeURIComponent).join('/'), base).href;
  }

  // ---- connections and recovery -----------------------------------------------------------

  private openConnection(handshakeTimeoutMs: number): Promise<Connection> {
    return Connection.open({
      url: this.url,
      token: this.options.token,
      ca: this.options.ca,
      generation: this.nextGeneration++,
      handshakeTimeoutMs,
      keepaliveIntervalMs: this.keepaliveIntervalMs,
      keepaliveTimeoutMs: this.keepaliveTimeoutMs,
      jsonrpc: this.options.jsonrpc ?? true,
      onNotification: (method, params) => this.onNotification(method, params),
      onBinaryFrame: (frame) => this.onBinaryFrame(frame),
      output: {
        memoryFor: (header) => this.outputMemoryFor(header),
        output: (header, pieces, memory) => this.onBinaryOutput(header, pieces, memory),
      },
      onClose: (reason, connection) => this.onConnectionClosed(reason, connection),
      onStrayError: (error) => this.log('warn', `server reported an error for an unidentifiable message: ${error.code} ${error.message}`),
    });
  }

  /**
   * Creates the session. A transport failure (refused, reset, a handshake cut, no answer)
   * is retried like any reconnect, with the same backoff, until the recovery deadline
   * counted from the first attempt: a server restarting or a link flapping at that moment
   * is the same fault as a later drop. Auth refusals, JSON-RPC refusals (too many
   * sessions) and 4xx answers end it at once.
   */
  private async firstConnect(): Promise<void> {
    const signal = this.options.signal;
    signal?.throwIfAborted();
    const deadline = Date.now() + this.recoveryDeadlineMs;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.connectOnce(Math.max(MIN_ATTEMPT_MS, deadline - Date.now()));
        break;
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        if (err instanceof AuthRefusedError) throw new SessionLostError('auth', { cause: err });
        if (!isTransportError(err)) throw err;
        const remaining = deadline - Date.now();
        if (remaining <= 0) throw gaveUp(err as Error, this.recoveryDeadlineMs, attempt);
        if (attempt === 1) this.log('warn', `cannot reach ${this.url} (${(err as Error).message}); retrying for up to ${formatSeconds(this.recoveryDeadlineMs)}`);
        this.emit('retry', { attempt, error: err as Error });
        // The last wait ends at the deadline, where one last attempt is made. An abort
        // cuts it short (a connecting attempt is destroyed by connectOnce).
        await sleep(Math.min(reconnectDelayMs(attempt + 1), remaining), signal);
        signal?.throwIfAborted();
      }
    }
    signal?.addEventListener('abort', () => void this.close(), { once: true });
  }

  private async connectOnce(remainingMs: number): Promise<void> {
    const signal = this.options.signal;
    let connection: Connection | undefined;
    const onAbort = () => connection?.destroy(new Error('aborted'));
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const budgetMs = Math.min(remainingMs, Math.max(this.keepaliveTimeoutMs, 5000));
      connection = await this.openConnection(budgetMs);
      signal?.throwIfAborted();
      // A server that accepts the socket but never answers must not hang connect().
      const open = connection;
      const timer = setTimeout(() => open.destroy(new Error(`the server did not answer initialize within ${budgetMs} ms`)), budgetMs);
      const init = await connection.request<InitializeResult>(Method.initialize, this.initializeParams()).finally(() => clearTimeout(timer));
      if (!init || typeof init.sessionId !== 'string') throw new Error('initialize answered without a sessionId');
      this._extensions = new Set((init.tether?.extensions ?? []).filter((name): name is ExtensionName => this.extensionRequest?.extensions.includes(name) ?? false));
      if (this.acks) this.acknowledger.setWindow(init.tether?.outputWindow ?? DEFAULT_OUTPUT_WINDOW);
      connection.notify(Method.initialized, {});
      this._sessionId = init.sessionId;
      if (init.environmentInfo) this.envInfo = init.environmentInfo;
      this.engine.start(connection);
    } catch (err) {
      connection?.destroy(err as Error);
      throw err;
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  private onConnectionClosed(reason: Error, connection: Connection): void {
    this.engine.lost(connection, reason);
  }

  /**
   * One recovery attempt (the engine's `resume`): a new connection, the session resumed on
   * it, every live process caught up. Throws to be retried (or to fail, see `fatal`).
   */
  private async resume(remainingMs: number, signal: AbortSignal): Promise<Connection> {
    let candidate: Connection | undefined;
    const onAbort = () => candidate?.destroy(signal.reason instanceof Error ? signal.reason : new Error('recovery stopped'));
    signal.addEventListener('abort', onAbort, { once: true });
    try {
      candidate = await this.openConnection(Math.min(remainingMs, Math.max(this.keepaliveTimeoutMs, 1000)));
      if (signal.aborted) throw signal.reason;
      const init = await candidate.request<InitializeResult>(Method.initialize, this.initializeParams(this._sessionId));
      if (!init || init.sessionId !== this._sessionId) throw new WrongSessionError(init?.sessionId);
      candidate.notify(Method.initialized, {});
      // With acks the server sends every process's events after what we delivered, in order;
      // without, read back what each process produced meanwhile.
      if (!this.acks) await this.catchUp(candidate);
      if (!candidate.isOpen) throw new Error('connection lost during catch-up');
      return candidate;
    } catch (err) {
      candidate?.destroy(err as Error);
      throw err;
    } finally {
      signal.removeEventListener('abort', onAbort);
    }
  }

  /** Reads what every live, started process produced since its last delivered event. */
  private async catchUp(connection: Connection): Promise<void> {
    const live = [...this.processes.values()].filter((p) => p.live && p.started);
    await Promise.all(
      live.map(async (proc) => {
        let afterSeq = proc.sequencer.lastDelivered;
        let startingSince: number | undefined;
        for (;;) {
          try {
            const result = await connection.request<ProcessReadResult>(Method.processRead, { processId: proc.id, afterSeq });
            proc.mergeRead(afterSeq, result);
            // A server caps one answer (tether: 8 MiB); a big answer may have stopped short.
            if (!proc.live || !mayBeCut(result)) return;
            afterSeq = proc.sequencer.lastDelivered;
          } catch (err) {
            if (err instanceof ConnectionLostError) throw err;
            // Codex: its output already flowed (so the handle counts it started) but the start
            // itself is still in progress there ("process id … is starting"): ask again.
            if (isStarting(err) && (startingSince ??= Date.now()) > Date.now() - STILL_STARTING_MS) {
              await sleep(20);
              continue;
            }
            // The server cannot tell us what this process did: only this process fails.
            proc.fail(
              isUnknownProcess(err)
                ? new OutputLostError(proc.id, afterSeq + 1, Infinity, 'could not be read: the server no longer knows the process')
                : (err as Error),
            );
            return;
          }
        }
      }),
    );
  }

  /** The engine changed state: the client's own consequences, then the public event. */
  private onStateChange(change: StateChange): void {
    if (change.state === 'connected') {
      if (this.flowPaused) this.engine.current?.pause(); // the catch-up is in; the consumer is still behind
      if (this.acks) this.acknowledger.flushAll(); // acks sent just before the drop may be lost
    } else if (change.state === 'failed') {
      clearInterval(this.flowTimer);
      this.acknowledger.dispose();
      const error = this.engine.failure!;
      for (const proc of [...this.processes.values()]) proc.fail(error);
      this.processes.clear();
      this.byHandle.clear();
    }
    this.emit('state', change);
  }

  private fail(reason: SessionLostReason, cause?: unknown): void {
    this.engine.fail(reason, cause);
  }

  private onNotification(method: string, params: unknown): void {
    if (!params || typeof params !== 'object') return;
    const p = params as Record<string, unknown>;
    if (method === 'fs/missingChanged') {
      if (typeof p.watchId === 'number') this.emit('fs/missingChanged', p.watchId);
      return;
    }
    if (typeof p.processId !== 'string' || typeof p.seq !== 'number') return;
    const proc = this.processes.get(p.processId);
    if (!proc) {
      // Closed and forgotten (its close ack was lost with a socket): tell the server again,
      // so it can forget the process too.
      if (method === Method.processClosed && this.acks) this.acknowledger.consumed(p.processId, p.seq, 0, true);
      return;
    }
    switch (method) {
      case Method.processOutput:
        if (typeof p.chunk !== 'string') return;
        proc.accept({ type: 'output', seq: p.seq, stream: (p.stream as OutputStream) ?? 'stdout', data: Buffer.from(p.chunk, 'base64') });
        return;
      case Method.processExited:
        proc.accept({ type: 'exit', seq: p.seq, exitCode: typeof p.exitCode === 'number' ? p.exitCode : -1 });
        return;
      case Method.processClosed:
        proc.accept({ type: 'close', seq: p.seq });
        return;
    }
  }

  /** Extension `binaryOutput`: one output frame (anything else from a server is ignored, like garbage JSON). */
  private onBinaryFrame(fragments: Buffer[]): void {
    const decoded = decodeBinaryFragments(fragments);
    if (!decoded.ok || decoded.frame.kind !== 'output') return;
    const frame = decoded.frame;
    this.byHandle.get(frame.handle)?.accept(outputEvent(frame.seq, frame.stream, frame.parts ?? [frame.data]));
  }

  /** Extension `binaryOutput`, taken off the socket whole (client/demux-socket.ts): where its bytes may go. */
  private outputMemoryFor(header: Buffer): ByteArena | null {
    const target = peekOutputHeader(header);
    return (target && this.byHandle.get(target.handle)?.outputMemory(target.stream)) ?? null;
  }

  /** Extension `binaryOutput`, taken off the socket whole: one output message, its bytes in `memory` (or its own). */
  private onBinaryOutput(header: Buffer, pieces: Buffer[], memory: ByteArena | null): void {
    const decoded = decodeBinaryFragments([header, ...pieces]);
    const frame = decoded.ok && decoded.frame.kind === 'output' ? decoded.frame : null;
    const proc = frame ? this.byHandle.get(frame.handle) : undefined;
    if (!frame || !proc) {
      memory?.releaseAll(pieces);
      return;
    }
    proc.accept(outputEvent(frame.seq, frame.stream, frame.parts ?? [frame.data]), memory);
  }

  private forget(proc: ExecProcess): void {
    if (this.processes.get(proc.id) === proc) this.processes.delete(proc.id);
    if (proc.handle !== 0 && this.byHandle.get(proc.handle) === proc) this.byHandle.delete(proc.handle);
  }

  private log(level: LogLevel, message: string): void {
    this.options.logger?.(level, message);
  }
}

/** Codex requires every member of `envPolicy`; fill in the protocol's defaults. */
export function fullEnvPolicy(policy: EnvPolicy): Required<EnvPolicy> {
  return {
    inherit: policy.inherit ?? 'all',
    ignoreDefaultExcludes: policy.ignoreDefaultExcludes ?? false,
    exclude: policy.exclude ?? [],
    set: policy.set ?? {},
    includeOnly: policy.includeOnly ?? [],
  };
}

function isUnknownProcess(err: unknown): boolean {
  return err instanceof RpcError && err.code === ErrorCode.InvalidRequest && /unknown process id/i.test(err.message);
}

function isStarting(err: unknown): boolean {
  return err instanceof RpcError && err.code === ErrorCode.InvalidRequest && /is starting/i.test(err.message);
}

function isDuplicateProcess(err: unknown): boolean {
  return err instanceof RpcError && err.code === ErrorCode.InvalidRequest && /already exists/i.test(err.message);
}

/**
 * Worth another attempt: the link or the server's availability failed, not the server's
 * judgement. Refusals (JSON-RPC errors, HTTP 4xx) and programming errors are final.
 */
function isTransportError(err: unknown): boolean {
  if (err instanceof RpcError || err instanceof AuthRefusedError || err instanceof TypeError || err instanceof SyntaxError) return false;
  const { status, code } = err as { status?: unknown; code?: unknown };
  if (typeof status === 'number' && status >= 400 && status < 500) return false;
  // A certificate that does not verify, or TLS spoken to a plain port: no retry changes that.
  return !(typeof code === 'string' && TLS_REFUSAL.test(code));
}

const TLS_REFUSAL = /CERT|SELF_SIGNED|^UNABLE_TO_|HOSTNAME_MISMATCH|^INVALID_CA$|^PATH_LENGTH_EXCEEDED$|^INVALID_PURPOSE$|^ERR_TLS_|^ERR_SSL_/;

function gaveUp(last: Error, deadlineMs: number, attempts: number): Error {
  const tries = attempts === 1 ? '' : ` (${attempts} attempts in ${formatSeconds(deadlineMs)}, the recovery deadline)`;
  return Object.assign(new Error(`${last.message}${tries}`, { cause: last }), { code: (last as NodeJS.ErrnoException).code });
}

function formatSeconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(1))} s`;
}

/** A read answer that may have been cut short by the server's cap (it ends on its last chunk, and is big). */
function mayBeCut(result: ProcessReadResult): boolean {
  const last = result.chunks[result.chunks.length - 1];
  if (!last || result.closed || result.nextSeq !== last.seq + 1) return false;
  let bytes = 0;
  for (const c of result.chunks) bytes += (c.chunk.length * 3) / 4;
  return bytes >= 1024 * 1024;
}

/** A consumed stream (read, piped, or a destination written to) holds more than `limit` bytes. */
function isBehind(stream: Readable | Writable, limit: number): boolean {
  if (stream.destroyed) return false;
  if (stream instanceof Readable) return stream.readableFlowing !== null && stream.readableLength > limit;
  return (stream as Writable).writableLength > limit;
}

/** A resume answered with another session id than ours: that session is gone. */
class WrongSessionError extends Error {
  constructor(got: unknown) {
    super(`the server resumed a different session (${String(got)})`);
  }
}

function isUnknownSession(err: unknown): boolean {
  return err instanceof RpcError && err.code === ErrorCode.InvalidRequest && /unknown session id/i.test(err.message);
}
