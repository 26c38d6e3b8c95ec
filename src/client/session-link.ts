/**
 * The session link: the first connect (retried until the recovery deadline), and each
 * recovery attempt (a new connection, the session resumed on it, every live process caught
 * up). Connection generations and the recovery state machine are `ReconnectEngine`'s
 * (engine.ts); this supplies its `resume`.
 */
import { Method, type InitializeParams, type InitializeResult, type ProcessReadResult } from '../protocol/types.js';
import { RpcError } from '../protocol/errors.js';
import { EXTENSIONS_VERSION, KnownExtensions, type ExtensionName } from '../protocol/extensions.js';
import type { ByteArena } from '../util/byte-arena.js';
import type { LogLevel } from '../util/logger.js';
import { sleep } from '../util/timeouts.js';
import { reconnectDelayMs } from './backoff.js';
import { RunningClock } from './running-clock.js';
import { Connection } from './connection.js';
import { ReconnectEngine } from './engine.js';
import { isStarting, isUnknownProcess, isUnknownSession } from './error-text.js';
import { AuthRefusedError, closeNoticeOf, ConnectionLostError, OutputLostError, SessionLostError, UpgradeAnsweredError, WrongSessionError } from './errors.js';
import type { ExecClientOptions } from './options.js';
import { failProcess, isLive, isStarted, mergeRead, sequencerOf, type ExecProcess } from './process/process.js';
import { STILL_STARTING_MS } from './process/process-ops.js';
import { speaksTls } from './tls-probe.js';
import { ATTACH_EXTENSION, type AttachedSession, type AttachRequest, type AttachRole } from './attach/attach-wire.js';

const DEFAULT_DEADLINE_MS = 25_000;
const DEFAULT_KEEPALIVE_TIMEOUT_MS = 10_000;
/** The first connect's last attempt, made at its deadline, still gets this long. */
const MIN_ATTEMPT_MS = 250;

/** What the link needs from the rest of the client. */
export interface LinkHost {
  /** The processes the client follows. */
  processes(): ExecProcess[];
  /** Processes forgotten after their close was delivered: id → the close's seq. */
  forgotten(): ReadonlyMap<string, number>;
  /** Inbound traffic of every connection. */
  onNotification(method: string, params: unknown): void;
  onBinaryFrame(fragments: Buffer[]): void;
  outputMemoryFor(header: Buffer): ByteArena | null;
  onBinaryOutput(header: Buffer, pieces: Buffer[], memory: ByteArena | null): void;
  /** The first `initialize` was answered (extensions known). */
  initialized(init: InitializeResult): void;
  /** The first connect failed one attempt and will try again. */
  retry(attempt: number, error: Error): void;
}

export class SessionLink {
  readonly engine: ReconnectEngine<Connection>;
  sessionId = '';
  /** The extensions the server accepted for this session. */
  extensions: ReadonlySet<ExtensionName> = new Set();
  readonly recoveryDeadlineMs: number;
  private readonly keepaliveTimeoutMs: number;
  private readonly keepaliveIntervalMs: number;
  private readonly clientName: string;
  /** What `initialize` asks for (the same on every resume: the server keeps the set fixed). */
  private readonly extensionRequest: InitializeParams['tether'];
  private nextGeneration = 1;
  /**
   * Extension `attach`: this link's role in a session it did not create (null: its own
   * session). A writer recovers by resuming, as the creator would; a watcher (or a writer
   * whose session was taken) by attaching again as a watcher.
   */
  role: AttachRole | null;
  /** Extension `attach`: the session as the attach's `initialize` answer described it. */
  attached: AttachedSession | null = null;

  constructor(
    readonly url: string,
    private readonly options: ExecClientOptions,
    private readonly host: LinkHost,
    private readonly attachRequest?: AttachRequest,
  ) {
    this.role = attachRequest?.role ?? null;
    this.recoveryDeadlineMs = options.recoveryDeadlineMs ?? DEFAULT_DEADLINE_MS;
    this.keepaliveTimeoutMs = options.keepaliveTimeoutMs ?? DEFAULT_KEEPALIVE_TIMEOUT_MS;
    this.keepaliveIntervalMs = options.keepaliveIntervalMs ?? Math.min(5000, Math.max(10, Math.floor(this.keepaliveTimeoutMs / 3)));
    this.clientName = options.clientName ?? 'tether-client';
    const wanted = options.extensions ?? KnownExtensions;
    const keepMs = options.sessionKeepMs === undefined ? {} : { keepMs: Math.ceil(options.sessionKeepMs) };
    // A named session, or an attach, asks for `attach` too (the server refuses them without it).
    const asked: string[] = options.name !== undefined || attachRequest ? [...new Set<string>([...wanted, ATTACH_EXTENSION])] : [...wanted];
    this.extensionRequest = asked.length > 0 ? { version: EXTENSIONS_VERSION, extensions: asked, ...keepMs } : undefined;
    this.engine = new ReconnectEngine<Connection>({
      recoveryDeadlineMs: this.recoveryDeadlineMs,
      resume: (attempt, remainingMs, signal) => this.resume(remainingMs, signal),
      fatal: (err) =>
        err instanceof AuthRefusedError
          ? 'auth'
          : isUnknownSession(err) || err instanceof WrongSessionError
            ? 'expired'
            : closeNoticeOf(err)?.kind === 'stopped'
              ? 'stopped' // the server we resumed on stopped during the catch-up
              : undefined,
      sessionId: () => this.sessionId,
      logger: options.logger,
    });
  }

  /** The session acknowledges output (extension `acks`): per-process flow control, replay on resume. */
  get acks(): boolean {
    return this.extensions.has('acks');
  }

  /** The current connection, waiting while recovering; rejects once failed. */
  ready(): Promise<Connection> {
    return this.engine.ready();
  }

  /** The current connection if connected and open. */
  openConnection(): Connection | undefined {
    const connection = this.engine.current;
    return this.engine.state === 'connected' && connection?.isOpen ? connection : undefined;
  }

  /**
   * Creates the session. A transport failure (refused, reset, a handshake cut, no answer)
   * is retried like any reconnect, with the same backoff, until the recovery deadline
   * counted from the first attempt, in running time (running-clock.ts) as a recovery's: a
   * server restarting or a link flapping at that moment is the same fault as a later drop.
   * Auth refusals, JSON-RPC refusals (too many sessions) and 4xx answers end it at once.
   */
  async firstConnect(): Promise<void> {
    const signal = this.options.signal;
    signal?.throwIfAborted();
    const clock = new RunningClock();
    try {
      await this.firstConnectOn(clock);
    } finally {
      clock.stop();
    }
  }

  private async firstConnectOn(clock: RunningClock): Promise<void> {
    const signal = this.options.signal;
    const deadline = this.recoveryDeadlineMs;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.connectOnce(Math.max(MIN_ATTEMPT_MS, deadline - clock.elapsed()));
        break;
      } catch (err) {
        if (signal?.aborted) throw signal.reason;
        if (err instanceof AuthRefusedError) throw new SessionLostError('auth', { cause: err });
        if (!isTransportError(err)) throw err;
        if (attempt === 1 && (await this.tlsOnPlainUrl(err))) {
          throw Object.assign(new Error(`the server speaks TLS there: use ${this.url.replace(/^ws:/i, 'wss:')}`, { cause: err }), { code: 'TLS_ON_PLAIN_URL' });
        }
        if (signal?.aborted) throw signal.reason;
        const remaining = deadline - clock.elapsed();
        if (remaining <= 0) throw gaveUp(err as Error, this.recoveryDeadlineMs, attempt);
        if (attempt === 1) this.log('warn', `cannot reach ${this.url} (${(err as Error).message}); retrying for up to ${formatSeconds(this.recoveryDeadlineMs)}`);
        this.host.retry(attempt, err as Error);
        // The last wait ends at the deadline, where one last attempt is made (a stop of the
        // process ends a wait early: the attempt then comes at once). An abort cuts it short
        // (a connecting attempt is destroyed by connectOnce).
        await sleep(Math.min(reconnectDelayMs(attempt + 1), remaining), signal);
        signal?.throwIfAborted();
      }
    }
  }

  /**
   * A `ws://` upgrade the server hung up on without an answer: Node's TLS server (a tether
   * server with a certificate) does that to plain HTTP; a server going away does too. A TLS
   * handshake with the port tells them apart, once, on the first attempt.
   */
  private async tlsOnPlainUrl(err: unknown): Promise<boolean> {
    if ((err as NodeJS.ErrnoException).code !== 'ECONNRESET') return false;
    const url = new URL(this.url);
    if (url.protocol !== 'ws:') return false;
    return speaksTls(url, Math.max(MIN_ATTEMPT_MS, Math.min(this.keepaliveTimeoutMs, 5000)), this.options.signal);
  }

  private async connectOnce(remainingMs: number): Promise<void> {
    const signal = this.options.signal;
    let connection: Connection | undefined;
    const onAbort = () => connection?.destroy(new Error('aborted'));
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      const budgetMs = Math.min(remainingMs, Math.max(this.keepaliveTimeoutMs, 5000));
      connection = await this.open(budgetMs);
      signal?.throwIfAborted();
      // A server that accepts the socket but never answers must not hang connect().
      const open = connection;
      const timer = setTimeout(() => open.destroy(new Error(`the server did not answer initialize within ${budgetMs} ms`)), budgetMs);
      const init = await connection.request<InitializeResult>(Method.initialize, this.initializeParams()).finally(() => clearTimeout(timer));
      if (!init || typeof init.sessionId !== 'string') throw new Error('initialize answered without a sessionId');
      this.extensions = new Set((init.tether?.extensions ?? []).filter((name): name is ExtensionName => this.extensionRequest?.extensions.includes(name) ?? false));
      if (this.attachRequest || this.options.name !== undefined) {
        if (!(init.tether?.extensions as string[] | undefined)?.includes(ATTACH_EXTENSION)) {
          throw Object.assign(new Error(`this server cannot ${this.attachRequest ? 'attach to sessions' : 'name sessions'} (extension attach not accepted: a Codex exec-server or an older tether)`), { code: 'NO_ATTACH' });
        }
      }
      if (this.attachRequest) {
        const attached = (init.tether as { attached?: AttachedSession } | undefined)?.attached;
        if (!attached || !Array.isArray(attached.processes)) throw Object.assign(new Error('the server answered the attach without describing the session (tether.attached)'), { code: 'NO_ATTACH' });
        this.attached = attached;
        this.role = attached.role ?? this.attachRequest.role;
      }
      // The Codex dialect: a Codex exec-server, whose socket leaves Nagle's algorithm on.
      if (this.extensions.size === 0) connection.ackReadsPromptly();
      this.host.initialized(init);
      connection.notify(Method.initialized, {});
      this.sessionId = init.sessionId;
      this.engine.start(connection);
    } catch (err) {
      connection?.destroy(err as Error);
      throw err;
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  private initializeParams(resumeSessionId?: string): InitializeParams {
    const params: InitializeParams = { clientName: this.clientName };
    if (resumeSessionId !== undefined && this.role === 'watcher') {
      // A watcher has no session of its own to resume: it attaches again, by the full id.
      const attach: AttachRequest = { session: resumeSessionId, role: 'watcher' };
      return { ...params, tether: { ...this.extensionRequest!, attach } as InitializeParams['tether'] };
    }
    if (resumeSessionId !== undefined) params.resumeSessionId = resumeSessionId;
    if (this.extensionRequest) params.tether = this.extensionRequest;
    if (resumeSessionId === undefined && this.extensionRequest) {
      // Extension `attach`, on the first initialize only: the new session's name, or the session to attach to.
      const extra: { name?: string; attach?: AttachRequest } = {};
      if (this.options.name !== undefined) extra.name = this.options.name;
      if (this.attachRequest) extra.attach = this.attachRequest;
      params.tether = { ...this.extensionRequest, ...extra } as InitializeParams['tether'];
    }
    if (resumeSessionId !== undefined && this.acks) {
      // Where each process stands: the server sends its events from the next one on.
      // Forgotten ones too: their final ack may have been lost, and all their output would come again.
      const delivered: Record<string, number> = Object.fromEntries(this.host.forgotten());
      // Started ones only: one whose start answer is still awaited is settled by that start's
      // retry (read back, else started), never reported lost for a start that may not have run.
      for (const proc of this.host.processes()) if (isLive(proc) && isStarted(proc)) delivered[proc.id] = sequencerOf(proc).lastDelivered;
      params.tether = { ...this.extensionRequest!, delivered };
    }
    return params;
  }

  private open(handshakeTimeoutMs: number): Promise<Connection> {
    return Connection.open({
      url: this.url,
      token: this.options.token,
      ca: this.options.ca,
      generation: this.nextGeneration++,
      handshakeTimeoutMs,
      keepaliveIntervalMs: this.keepaliveIntervalMs,
      keepaliveTimeoutMs: this.keepaliveTimeoutMs,
      jsonrpc: this.options.jsonrpc ?? true,
      onNotification: (method, params) => this.host.onNotification(method, params),
      onBinaryFrame: (frame) => this.host.onBinaryFrame(frame),
      output: {
        memoryFor: (header) => this.host.outputMemoryFor(header),
        output: (header, pieces, memory) => this.host.onBinaryOutput(header, pieces, memory),
      },
      onClose: (reason, connection) => this.engine.lost(connection, reason, closeNoticeOf(reason)),
      onStrayError: (error) => this.log('warn', `server reported an error for an unidentifiable message: ${error.code} ${error.message}`),
    });
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
      candidate = await this.open(Math.min(remainingMs, Math.max(this.keepaliveTimeoutMs, 1000)));
      if (signal.aborted) throw signal.reason;
      const init = await candidate.request<InitializeResult>(Method.initialize, this.initializeParams(this.sessionId));
      if (!init || init.sessionId !== this.sessionId) throw new WrongSessionError(init?.sessionId);
      candidate.notify(Method.initialized, {});
      this.failLost(init);
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

  /**
   * `acks`: processes the server says a restart could not keep (`tether.lost`): their
   * remaining events will never come, so each fails now with the server's reason.
   */
  private failLost(init: InitializeResult): void {
    const lost = init.tether?.lost;
    if (!lost || typeof lost !== 'object') return;
    for (const proc of this.host.processes()) {
      const reason = Object.hasOwn(lost, proc.id) ? lost[proc.id] : undefined;
      if (typeof reason !== 'string' || !isLive(proc) || !isStarted(proc)) continue;
      failProcess(proc, new OutputLostError(proc.id, sequencerOf(proc).lastDelivered + 1, Infinity, `could not be delivered: ${reason}`));
    }
  }

  /** Reads what every live, started process produced since its last delivered event. */
  private async catchUp(connection: Connection): Promise<void> {
    const live = this.host.processes().filter((p) => isLive(p) && isStarted(p));
    await Promise.all(
      live.map(async (proc) => {
        let afterSeq = sequencerOf(proc).lastDelivered;
        let startingSince: number | undefined;
        for (;;) {
          try {
            const result = await connection.request<ProcessReadResult>(Method.processRead, { processId: proc.id, afterSeq });
            mergeRead(proc, afterSeq, result);
            // A server caps one answer (tether: 8 MiB); a big answer may have stopped short.
            if (!isLive(proc) || !mayBeCut(result)) return;
            afterSeq = sequencerOf(proc).lastDelivered;
          } catch (err) {
            if (err instanceof ConnectionLostError) throw err;
            // Codex: its output already flowed (so the handle counts it started) but the start
            // itself is still in progress there ("process id … is starting"): ask again.
            if (isStarting(err) && (startingSince ??= Date.now()) > Date.now() - STILL_STARTING_MS) {
              await sleep(20);
              continue;
            }
            // The server cannot tell us what this process did: only this process fails.
            failProcess(proc, 
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

  private log(level: LogLevel, message: string): void {
    this.options.logger?.(level, message);
  }
}

/**
 * Worth another attempt: the link or the server's availability failed, not the server's
 * judgement. Refusals (JSON-RPC errors, HTTP 4xx) and programming errors are final.
 */
function isTransportError(err: unknown): boolean {
  if (err instanceof RpcError || err instanceof AuthRefusedError || err instanceof TypeError || err instanceof SyntaxError) return false;
  // An HTTP answer instead of the upgrade: only "not now" (429, 502-504) is worth another try.
  if (err instanceof UpgradeAnsweredError) return err.transient;
  const { code } = err as { code?: unknown };
  // A certificate that does not verify, TLS spoken to a plain port (EPROTO), or an answer that
  // is not HTTP at all (the parser's HPE_ codes): no retry changes that.
  return !(typeof code === 'string' && (TLS_REFUSAL.test(code) || NOT_HTTP.test(code)));
}

/** Node's and OpenSSL's error codes (not message text) for a TLS peer that cannot be trusted or spoken to. */
const TLS_REFUSAL = /CERT|SELF_SIGNED|^UNABLE_TO_|HOSTNAME_MISMATCH|^INVALID_CA$|^PATH_LENGTH_EXCEEDED$|^INVALID_PURPOSE$|^ERR_TLS_|^ERR_SSL_|^EPROTO$/;
/** Node's HTTP parser's codes: the peer answered, but not in HTTP. */
const NOT_HTTP = /^HPE_/;

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
