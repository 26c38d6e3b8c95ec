/**
 * The relay's back-end (server/backend.ts): every downstream session is served by one
 * upstream session, held by tether's `ExecClient` (resume, replay, acknowledged output,
 * exactly-once writes, idempotency keys for mutating fs calls when the upstream is tether).
 *
 * `RemoteBackend.connect` first opens one upstream session to learn what the upstream is:
 * the extensions it accepts (the relay offers its clients those and no more) and its
 * `environment/info` (answered downstream as it is). Then each downstream session opens its
 * own upstream session when it is created, and closes it when it expires or is closed. An
 * upstream session that is lost (expired upstream, the recovery deadline passed, refused)
 * expires its downstream session: its client hears "unknown session" / "unknown process", as
 * from a Codex server, never a hang.
 *
 * While the upstream is down, each open retries until the recovery deadline, counted from the
 * downstream session's creation. At most `maxOpening` opens run at once, the others wait their
 * turn in order (open-gate.ts): that bounds the retries and the memory they hold, and what the
 * upstream sees at recovery. A downstream session closed or expired meanwhile drops its open:
 * at once if it was waiting its turn or an attempt had already failed (the upstream is down),
 * otherwise when the attempt in flight ends (finishing it, then closing what it opened, leaves
 * no upstream session behind).
 */
import { type ExecClientOptions, ExecClient } from '../client/index.js';
import { runningTimeout } from '../client/running-clock.js';
import { internalError, type EnvironmentInfo, type ExtensionName } from '../protocol/index.js';
import type { ServerBackend, SessionBackend } from '../server/backend/index.js';
import { remoteHttpRequest } from './remote-http.js';
import { RemoteFsWork } from './remote-fs.js';
import { spawnRemote } from './remote-child.js';
import { formatAge } from '../util/format.js';
import type { Logger } from '../util/logger.js';
import { OpenGate } from './open-gate.js';
import { upstreamWaitReport } from './upstream-wait.js';

export interface RemoteBackendOptions extends Omit<ExecClientOptions, 'signal'> {
  /**
   * Told when an upstream session is lost or cannot be opened, and while the first upstream
   * connection retries (stderr in the CLI).
   */
  log?: (message: string) => void;
  /** Upstream sessions being opened at once (default 16); the rest wait their turn, oldest first. */
  maxOpening?: number;
}

/** The recovery deadline when none is given (the client's own default). */
const DEFAULT_DEADLINE_MS = 25_000;
const DEFAULT_MAX_OPENING = 16;

/** Output of one upstream process held unread (its log full) before the upstream socket is paused (no `acks`). */
export const UPSTREAM_OUTPUT_HIGH_WATER_MARK = 1024 * 1024;

export class RemoteBackend implements ServerBackend {
  private readonly sessions = new Set<RemoteSession>();
  /** Upstream sessions being closed (awaited by `close`). */
  private readonly closing = new Set<Promise<void>>();
  private readonly gate: OpenGate;

  private constructor(
    readonly url: string,
    private readonly options: RemoteBackendOptions,
    readonly extensions: ReadonlySet<ExtensionName>,
    private readonly info: EnvironmentInfo,
  ) {
    this.gate = new OpenGate(options.maxOpening ?? DEFAULT_MAX_OPENING);
  }

  /** Learns what the upstream offers (one session, closed again); rejects as `ExecClient.connect` does. */
  static async connect(url: string, options: RemoteBackendOptions = {}): Promise<RemoteBackend> {
    // `extensions`: what to ask the upstream for (default all; tests ask none to see a Codex upstream's rules).
    // Said at once and repeated while it retries: a relay whose upstream is down at start is not silent.
    const report = upstreamWaitReport({ url, deadlineMs: options.recoveryDeadlineMs, log: options.log ?? (() => {}) });
    const probe = await ExecClient.connect(url, {
      ...options,
      clientName: options.clientName ?? 'tether-relay',
      logger: (level, message) => {
        report.logger(level, message);
        options.logger?.(level, message);
      },
    }).finally(() => report.stop());
    try {
      const info = await probe.environmentInfo();
      return new RemoteBackend(url, options, new Set(probe.extensions), info);
    } finally {
      await probe.close();
    }
  }

  prepare(): void {
    // Nothing to ready: no keeper, nothing native (the relay runs on any laptop).
  }

  openSession(session: { readonly id: string; readonly extensions: ReadonlySet<ExtensionName> }, lost: (reason: string) => void): SessionBackend {
    const remote = new RemoteSession(this.url, this.options, [...this.extensions], this.info, this.gate, lost, (closing) => {
      this.sessions.delete(remote);
      this.closing.add(closing);
      void closing.finally(() => this.closing.delete(closing));
    });
    this.sessions.add(remote);
    return remote;
  }

  /** Upstream sessions open now (one per live downstream session). */
  get openSessions(): number {
    return this.sessions.size;
  }

  /** Upstream sessions being opened now (at most `maxOpening`), and waiting their turn. */
  get opening(): { inFlight: number; queued: number } {
    return { inFlight: this.gate.inFlight, queued: this.gate.queued };
  }

  /** Closes every upstream session (the relay is stopping), and waits for those being closed. */
  async close(): Promise<void> {
    await Promise.all([...[...this.sessions].map((s) => s.closeNow()), ...this.closing]);
  }
}

class RemoteSession implements SessionBackend {
  private readonly connected: Promise<ExecClient>;
  private closed = false;
  private closing: Promise<void> = Promise.resolve();
  /** Ends the open before it connected: waiting its turn, retrying, or at the deadline. */
  private readonly abandon = new AbortController();
  /**
   * waiting: for its turn at the gate, nothing sent upstream yet; connecting: the first attempt
   * in flight; retrying: an attempt failed (the upstream is down), it only retries from here on.
   */
  private phase: 'waiting' | 'connecting' | 'retrying' | 'connected' = 'waiting';
  private lastFailure = '';
  private readonly deadline: { cancel(): void };
  readonly fs: RemoteFsWork;

  constructor(
    url: string,
    options: RemoteBackendOptions,
    extensions: ExtensionName[],
    private readonly info: EnvironmentInfo,
    gate: OpenGate,
    lost: (reason: string) => void,
    /** Told once, with the upstream session's closing. */
    private readonly forget: (closing: Promise<void>) => void,
  ) {
    const recoveryDeadlineMs = options.recoveryDeadlineMs ?? DEFAULT_DEADLINE_MS;
    // The wait for a turn counts: the open ends at the deadline from the session's creation,
    // in running time as the client's own deadlines (a sleep of this machine does not count).
    this.deadline = runningTimeout(
      recoveryDeadlineMs,
      () => {
        const why = this.lastFailure ? `: ${this.lastFailure}` : '';
        this.abandon.abort(new Error(`the upstream was not reached within ${formatAge(recoveryDeadlineMs)} (the recovery deadline)${why}`));
      },
      { unref: true },
    );
    this.connected = this.open(url, { ...options, recoveryDeadlineMs }, extensions, gate).then((client) => {
      client.on('state', (change) => {
        if (change.state !== 'failed' || this.closed) return;
        const reason = `upstream session lost: ${change.reason ?? 'failed'}`;
        options.log?.(reason);
        lost(reason);
      });
      return client;
    });
    this.connected
      .catch((err: Error) => {
        if (this.closed) return;
        options.log?.(`cannot open an upstream session: ${err.message}`);
        lost(`cannot open an upstream session: ${err.message}`);
      })
      .finally(() => this.deadline.cancel());
    this.fs = new RemoteFsWork({ client: () => this.client() });
  }

  private async open(url: string, options: RemoteBackendOptions, extensions: ExtensionName[], gate: OpenGate): Promise<ExecClient> {
    const release = await gate.acquire(this.abandon.signal);
    this.phase = 'connecting';
    try {
      // Without `acks` (a Codex upstream) the relay's memory is bounded by pausing the upstream
      // socket once a process's output waits unread past the mark (client/flow.ts): the relay
      // stops taking output when its log is full, and nothing else would stop the socket.
      const outputHighWaterMark = options.outputHighWaterMark ?? UPSTREAM_OUTPUT_HIGH_WATER_MARK;
      const logger: Logger = (level, message) => {
        options.logger?.(level, message);
        // Before it connected, the client warns only that an attempt failed and it retries.
        if (level !== 'warn' || this.phase !== 'connecting') return;
        this.phase = 'retrying';
        this.lastFailure = message.replace(/; retrying.*$/, '');
        if (this.closed) this.abandon.abort(new Error('upstream session closed'));
      };
      const client = await ExecClient.connect(url, {
        ...options,
        outputHighWaterMark,
        clientName: options.clientName ?? 'tether-relay',
        extensions,
        signal: this.abandon.signal,
        logger,
      });
      this.phase = 'connected';
      this.deadline.cancel();
      return client;
    } finally {
      release();
    }
  }

  /** The upstream client, once connected; a session that is gone is -32603. */
  private async client(): Promise<ExecClient> {
    if (this.closed) throw internalError('upstream session closed');
    try {
      return await this.connected;
    } catch (err) {
      throw internalError(`upstream unavailable: ${(err as Error).message}`);
    }
  }

  async spawn(...[spec, events]: Parameters<SessionBackend['spawn']>) {
    return spawnRemote(await this.client(), spec, events);
  }

  async httpRequest(request: Parameters<SessionBackend['httpRequest']>[0]) {
    return remoteHttpRequest(await this.client(), request);
  }

  environmentInfo(): EnvironmentInfo {
    return this.info;
  }

  async environmentConfig(configPaths: string[][], requirementsPaths: string[][], cwd: string) {
    return (await this.client()).request<Awaited<ReturnType<SessionBackend['environmentConfig']>>>('environmentConfig/read', {
      cwd,
      configPaths,
      requirementsPaths,
    });
  }

  close(): void {
    void this.closeNow();
  }

  closeNow(): Promise<void> {
    if (this.closed) return this.closing;
    this.closed = true;
    // Not connected yet: waiting its turn or retrying, the open is dropped now; an attempt in
    // flight is let finish (cut, it could leave an upstream session detached for its TTL).
    if (this.phase === 'waiting' || this.phase === 'retrying') this.abandon.abort(new Error('upstream session closed'));
    // Connected or not yet: the upstream session is closed (its processes killed) either way.
    this.closing = this.connected.then(
      (client) => client.close(),
      () => {},
    );
    this.forget(this.closing);
    return this.closing;
  }
}
