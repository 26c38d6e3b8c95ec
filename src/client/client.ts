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
 *
 * This class is the facade; each job is its own module: session-link.ts (first connect,
 * resume, catch-up), process-ops.ts (per-process requests on retry.ts's `retryOnLoss`),
 * inbound.ts (routing frames to processes), flow.ts (Codex flow control), error-text.ts
 * (the server texts the client must read), attach/ (extension `attach`: an attached session's
 * handles); options.ts holds what `connect` and `spawn` are given.
 */

import { EventEmitter } from 'node:events';
import { randomUUID } from 'node:crypto';
import type { ExtensionName } from '../protocol/extensions.js';
import { Method, type EnvironmentInfo, type ProcessStartParams, type SessionListResult } from '../protocol/types.js';
import { settleWithin } from '../util/timeouts.js';
import { Acknowledger } from './acks.js';
import { isEnded, type EngineState, type RecoveredEvent, type RestartingEvent, type StateChange } from './engine.js';
import { CodexFlow } from './flow.js';
import { RemoteFs } from './fs/fs.js';
import { ConnectionLostError } from './errors.js';
import { OutcomeUnknownError } from './fs/errors.js';
import { ProcessTable } from './inbound.js';
import { checkConnectOptions, type AttachOptions, type ExecClientOptions, type SpawnOptions } from './options.js';
import { ExecProcess, failProcess, isStarted, outputStreamsOf } from './process/process.js';
import type { AttachRequest, AttachRole } from './attach/attach-wire.js';
import { Attachment, attachRequest } from './attach/attachment.js';
import { ProcessOps } from './process/process-ops.js';
import { SessionLink } from './session-link.js';

export type ClientState = EngineState;
export type { RecoveredEvent, RestartingEvent, StateChange } from './engine.js';
export { fullEnvPolicy } from './process/process-ops.js';

/** What the server granted for `sessionKeepMs` (`client.sessionKeep`). */
export interface SessionKeep {
  /** What the client asked (`sessionKeepMs`), ms; null: it asked nothing. */
  askedMs: number | null;
  /** How long the server keeps the session after a drop, ms. */
  grantedMs: number;
  /** The longest keep the server grants (its `--max-session-ttl`), ms. */
  maxMs: number;
}

/** `ExecClient`'s events and their arguments. */
export interface ExecClientEventMap {
  /** The client changed state (connected, recovering, failed, or closed by `close()`). */
  state: [change: StateChange];
  /** A recovery succeeded. */
  recovered: [event: RecoveredEvent];
  /** A connect or recovery attempt failed and will be retried. */
  retry: [event: { attempt: number; error: Error }];
  /**
   * The server closed the connection saying it restarts and keeps the session for `keptMs`
   * (docs/protocol.md, "When the server stops"): the client reconnects at once, within its
   * recovery deadline; a 'state' event (recovering) follows.
   */
  restarting: [event: RestartingEvent];
  /** Flow control without `acks` (`outputHighWaterMark`): the socket was paused or resumed. */
  flow: [event: { paused: boolean }];
  /** The server's `fs/missingChanged` for a watch of `fs` (used by `fs` itself). */
  'fs/missingChanged': [watchId: number];
  /**
   * Extension `attach`: this client was its session's writer and another attachment took the
   * session (`take`). It now watches: its handles go on delivering output (pulled, read-only
   * on the server: writes, signals and resizes are refused) until their processes close.
   */
  'writer-lost': [event: { reason: string }];
  /**
   * Extension `attach`, a watcher (`ExecClient.attach` with `role: 'watcher'`): the session's
   * writer started a process after this client attached. Its handle is like those of
   * `processes()` (where it now is too): read-only, `sinks` asked for it, and it delivers the
   * process's output from its first byte the server still holds, its exit and its close. A
   * watcher polls the session for them every `SESSION_POLL_MS` (500 ms) while attached.
   */
  process: [proc: ExecProcess];
}

/** The server's window when it does not say (acks batch at a quarter of it). */
const DEFAULT_OUTPUT_WINDOW = 8 * 1024 * 1024;

export class ExecClient extends EventEmitter<ExecClientEventMap> {
  /** The server's filesystem in the shape of `node:fs/promises` (fs.ts). */
  readonly fs: RemoteFs;
  readonly #link: SessionLink;
  readonly #table: ProcessTable;
  readonly #ops: ProcessOps;
  readonly #flow: CodexFlow;
  readonly #acknowledger: Acknowledger;
  readonly #options: ExecClientOptions;
  #envInfo: EnvironmentInfo | undefined;
  #envInfoPromise: Promise<EnvironmentInfo> | undefined;
  #closing = false;
  #keep: SessionKeep | null = null;
  /** Extension `attach`: the attached session's handles, and what becomes of them (attach/attachment.ts). */
  readonly #attachment: Attachment;

  private constructor(
    readonly url: string,
    options: ExecClientOptions,
    attachAs?: AttachRequest,
  ) {
    super();
    this.#options = options;
    checkConnectOptions(url, options);
    // A watcher never acknowledges: what the writer acknowledged is the session's to decide.
    this.#acknowledger = new Acknowledger((processId, seq) => this.#link.role !== 'watcher' && this.#ops.sendAck(processId, seq), DEFAULT_OUTPUT_WINDOW);
    this.#table = new ProcessTable({
      missingChanged: (watchId) => this.emit('fs/missingChanged', watchId),
      forgottenClose: (processId, seq) => {
        // An attached writer acknowledges only closes of processes it followed (another's are not its to end).
        if (this.#link.role !== null && !this.#table.forgotten().has(processId)) return;
        if (this.#link.acks) this.#acknowledger.consumed(processId, seq, 0, true);
      },
      writerChanged: ({ writer, reason }) => {
        if (!writer) this.#attachment.writerLost(reason ?? 'taken');
      },
      sessionEnded: (ended) => this.#attachment.sessionEnded(ended),
    });
    const table = this.#table;
    if (attachAs) this.#table.hold();
    const link = (this.#link = new SessionLink(url, options, {
      processes: () => table.all(),
      forgotten: () => table.forgotten(),
      onNotification: (method, params) => table.onNotification(method, params),
      onBinaryFrame: (fragments) => table.onBinaryFrame(fragments),
      outputMemoryFor: (header) => table.outputMemoryFor(header),
      onBinaryOutput: (header, pieces, memory) => table.onBinaryOutput(header, pieces, memory),
      initialized: (init) => {
        if (link.acks) this.#acknowledger.setWindow(init.tether?.outputWindow ?? DEFAULT_OUTPUT_WINDOW);
        if (init.environmentInfo) this.#envInfo = init.environmentInfo;
        const { keepMs, keepMaxMs } = init.tether ?? {};
        if (link.extensions.has('sessionKeep') && typeof keepMs === 'number') {
          this.#keep = { askedMs: options.sessionKeepMs ?? null, grantedMs: keepMs, maxMs: typeof keepMaxMs === 'number' ? keepMaxMs : keepMs };
        }
      },
      retry: (attempt, error) => this.emit('retry', { attempt, error }),
    }, attachAs));
    this.#flow = new CodexFlow({
      limit: options.outputHighWaterMark,
      acks: () => link.acks,
      *streams() {
        for (const proc of table.all()) yield* outputStreamsOf(proc);
      },
      pause: () => link.engine.current?.pause(),
      resume: () => link.engine.current?.resume(),
      changed: (paused) => this.emit('flow', { paused }),
    });
    this.#ops = new ProcessOps(
      {
        ready: () => link.ready(),
        openConnection: () => link.openConnection(),
        get extensions() {
          return link.extensions;
        },
        environmentInfo: () => this.environmentInfo(),
        logger: options.logger,
      },
      table,
      this.#flow,
      this.#acknowledger,
    );
    const client = this;
    this.#attachment = new Attachment({
      get role() {
        return link.role;
      },
      set role(role) {
        link.role = role;
      },
      table,
      ops: this.#ops,
      sessionLabel: () => this.sessionName ?? this.sessionId.slice(0, 8),
      writerLost: (reason) => this.emit('writer-lost', { reason }),
      processFound: (proc) => this.emit('process', proc),
    });
    this.fs = new RemoteFs({
      requestOnce: async (method, params) => (await link.ready()).request(method, params),
      get extensions() {
        return link.extensions;
      },
      get generation() {
        return link.engine.generation;
      },
      environmentInfo: () => client.environmentInfo(),
      onRecovered: (listener) => this.on('recovered', listener),
      onMissingChanged: (listener) => this.on('fs/missingChanged', listener),
    });
    link.engine.on('state', (change) => this.#onStateChange(change));
    link.engine.on('recovered', (event) => this.emit('recovered', event));
    link.engine.on('retry', (event) => this.emit('retry', event));
    link.engine.on('restarting', (event) => this.emit('restarting', event));
  }

  /** Connects, creates a session and returns the client. Rejects with the transport error, or `SessionLostError('auth')`. */
  static async connect(url: string, options: ExecClientOptions = {}): Promise<ExecClient> {
    const client = new ExecClient(url, options);
    await client.#link.firstConnect();
    options.signal?.addEventListener('abort', () => void client.close(), { once: true });
    return client;
  }

  /**
   * Attaches to a session this client did not create (extension `attach`): `target` is the
   * session's full id or its name (`connect`'s `name`), among the sessions of the token (any
   * token's with the server's admin token). `processes()` then returns a handle per process
   * of the session, following its output from what the session's writer acknowledged (from
   * the first event the server still holds with `fromStart`; older output is a 'gap').
   *
   * As `writer` (default) the handles are full `ExecProcess`es (stdin, kill, resize), the
   * client recovers through drops as the session's creator would, and `close()` ends the
   * session like any client's. A session that has a writer attached is refused (-32010)
   * unless `take`, which moves it here: the old writer is told and watches on.
   * As `watcher` the handles only read: stdin, kill, signal, terminate and resize throw. A
   * watcher pulls, never acknowledges, never slows the process; `close()` only disconnects.
   * While attached, a watcher polls the session (`session/watch`, every 500 ms, one request
   * at a time, waiting through drops): each process the writer starts after it attached
   * gets a handle like the others, from its first byte, added to `processes()` and told by a
   * 'process' event (`followNew: false`: none of that). A writer's own spawns are its own:
   * it does not poll.
   * Rejects with the server's refusal (an unknown session, a taken name…) or
   * `SessionLostError('auth')`, like `connect`.
   */
  static async attach(url: string, target: string, options: AttachOptions = {}): Promise<ExecClient> {
    const { request, connectOptions } = attachRequest(target, options);
    const client = new ExecClient(url, connectOptions, request);
    await client.#link.firstConnect();
    // Once connected (requests can go out): the handles, fed what arrived for them meanwhile.
    client.#attachment.adoptAll(client.#link.attached?.processes ?? [], options);
    // Aborting leaves the session as it found it: running, detached.
    options.signal?.addEventListener('abort', () => void client.detach(), { once: true });
    return client;
  }

  /** The session's name (`connect`'s `name`, or the attached session's), if it has one. */
  get sessionName(): string | undefined {
    return this.#link.attached?.name ?? this.#options.name;
  }

  /** Extension `attach`: `writer` or `watcher` in a session this client attached to; null in its own session. */
  get role(): AttachRole | null {
    return this.#link.role;
  }

  /**
   * Extension `attach`: the handles of the attached session's processes, those it had when
   * this client attached and, for a watcher, those found since (each told by a 'process'
   * event). A watcher's handle of a closed process leaves the list once the server no
   * longer lists the process either (`--closed-retention`).
   */
  processes(): ExecProcess[] {
    return this.#attachment.handles;
  }

  get state(): ClientState {
    return this.#link.engine.state;
  }

  get generation(): number {
    return this.#link.engine.generation;
  }

  get sessionId(): string {
    return this.#link.sessionId;
  }

  /**
   * How long the server keeps this session after a drop, as it granted it when the session
   * was created (extension `sessionKeep`); null against a server without it (a Codex server:
   * its session TTL, 30 s by default). `grantedMs < askedMs`: the server grants less than asked.
   */
  get sessionKeep(): SessionKeep | null {
    return this.#keep;
  }

  /** The extensions the server accepted for this session (empty against a Codex server). */
  get extensions(): ReadonlySet<ExtensionName> {
    return this.#link.extensions;
  }

  /** Processes this client still follows. */
  get liveProcesses(): ExecProcess[] {
    return this.#table.live();
  }

  /**
   * Any exec-server method. Waits while recovering and re-sends if the connection dies before
   * the answer (the protocol's methods are idempotent or made so; `process/start` is settled
   * by asking the server, as `spawn` does). With `{ resend: false }` it is sent at most once:
   * a connection lost before the answer rejects with `OutcomeUnknownError` (for a request
   * that changes something on a server that cannot answer a re-sent one from memory).
   */
  async request<T = unknown>(method: string, params: object = {}, options: { resend?: boolean } = {}): Promise<T> {
    if (options.resend === false) {
      const connection = await this.#link.ready();
      try {
        return await connection.request<T>(method, params);
      } catch (err) {
        if (err instanceof ConnectionLostError) throw new OutcomeUnknownError(method, requestPath(params), { cause: err });
        throw err;
      }
    }
    if (method === Method.processStart) {
      const p = params as ProcessStartParams;
      await this.#ops.start(p, () => {});
      return { processId: p.processId, sandboxType: 'none' } as T;
    }
    return this.#ops.call<T>(method, params);
  }

  /** The server's `environment/info` (from `initialize` when it sent it). */
  environmentInfo(): Promise<EnvironmentInfo> {
    if (this.#envInfo) return Promise.resolve(this.#envInfo);
    this.#envInfoPromise ??= this.#ops.call<EnvironmentInfo>(Method.environmentInfo, {}).then(
      (info) => (this.#envInfo = info),
      (err) => {
        this.#envInfoPromise = undefined;
        throw err;
      },
    );
    return this.#envInfoPromise;
  }

  /**
   * The sessions of this client's token and their processes (every session with the
   * server's admin token): extension `sessionList`. Rejects when the server did not accept
   * it (a Codex exec-server, an older tether).
   */
  async listSessions(): Promise<SessionListResult> {
    if (!this.extensions.has('sessionList')) {
      throw new Error('this server cannot list sessions (extension sessionList not accepted: a Codex exec-server or an older tether)');
    }
    return this.#ops.call<SessionListResult>(Method.sessionList, {});
  }

  /** Starts `argv` on the server. The handle is usable at once; 'spawn' fires when the server confirmed. */
  spawn(argv: string[], options: SpawnOptions = {}): ExecProcess {
    if (!Array.isArray(argv) || argv.length === 0 || argv.some((a) => typeof a !== 'string')) {
      throw new TypeError('spawn: argv must be a non-empty array of strings');
    }
    const processId = options.processId ?? randomUUID();
    if (this.#table.has(processId)) throw new Error(`spawn: process id ${processId} is already in use by this client`);
    const tty = options.tty ?? false;
    const proc = new ExecProcess(
      processId,
      argv,
      { tty, pipeStdin: options.pipeStdin ?? false, stdoutSink: options.stdout, stderrSink: options.stderr },
      this.#ops,
    );
    // Register before sending: output may arrive before the start answer.
    this.#table.add(proc, this.extensions.has('binaryOutput'));
    proc.once('close', () => this.#table.forget(proc));
    proc.closed.catch(() => this.#table.forget(proc));
    const failure = this.#link.engine.failure;
    if (failure) {
      failProcess(proc, failure);
      return proc;
    }
    void this.#ops.spawn(proc, argv, options);
    return proc;
  }

  /**
   * Extension `attach`: leaves the session running, detached (no process is killed, the
   * session is not closed): its processes go on, and it outlives this client for its keep
   * (`sessionKeepMs`). A later `ExecClient.attach` by id or name takes up where this client's
   * acknowledgements left off. Then closes the socket; handles fail with SessionLostError('closed').
   */
  async detach(): Promise<void> {
    const engine = this.#link.engine;
    if (this.#closing || isEnded(engine.state)) return;
    this.#closing = true;
    const connection = engine.current;
    // What was consumed is told before the socket goes (best effort: the next attach takes up from the last ack).
    if (this.#link.acks && this.#link.role !== 'watcher') this.#acknowledger.flushAll();
    engine.fail('closed');
    connection?.close();
  }

  /** Kills every live process (bounded wait), then closes the session's socket. A watcher only disconnects. */
  async close(): Promise<void> {
    if (this.#link.role === 'watcher') return this.detach();
    const engine = this.#link.engine;
    if (this.#closing || isEnded(engine.state)) return;
    this.#closing = true;
    const connection = engine.current;
    if (engine.state === 'connected' && connection?.isOpen) {
      // Kill what still runs and give the exits a moment to arrive, so handles end with
      // their real status (137) rather than SessionLostError('closed').
      const live = this.liveProcesses.filter((p) => isStarted(p));
      const kills = live.map((p) => connection.request(Method.processTerminate, { processId: p.id }).then(() => p.closed));
      await settleWithin(Promise.allSettled(kills), 2000);
      // End the session now rather than leaving it detached for its TTL (it would hold a
      // --max-sessions slot and whatever its processes left behind). Best effort: a lost
      // answer leaves the server's TTL to do the same later.
      if (this.extensions.has('sessionClose') && connection.isOpen) {
        await settleWithin(connection.request(Method.sessionClose, {}), 2000);
      }
    }
    engine.fail('closed');
    connection?.close();
  }

  /** The engine changed state: the client's own consequences, then the public event. */
  #onStateChange(change: StateChange): void {
    const engine = this.#link.engine;
    if (change.state === 'connected') {
      if (this.#flow.isPaused) engine.current?.pause(); // the catch-up is in; the consumer is still behind
      if (this.#link.acks) {
        this.#acknowledger.flushAll(); // acks sent just before the drop may be lost
        // So may the final acks of processes forgotten since: the server still holds their output.
        for (const [processId, seq] of this.#table.forgotten()) if (this.#acknowledger.consumedSeq(processId) === 0) this.#ops.sendAck(processId, seq);
      }
    } else if (isEnded(change.state)) {
      this.#attachment.stop();
      this.#flow.dispose();
      this.#acknowledger.dispose();
      const error = engine.failure!;
      for (const proc of this.#table.all()) failProcess(proc, error);
      this.#table.clear();
    }
    this.emit('state', change);
  }
}

/** What a request is about, for an `OutcomeUnknownError`: its path (or source path), else nothing. */
function requestPath(params: object): string {
  const p = params as { path?: unknown; sourcePath?: unknown; url?: unknown };
  const path = p.path ?? p.sourcePath ?? p.url;
  return typeof path === 'string' ? path : '';
}
