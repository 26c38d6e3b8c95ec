import { EventEmitter } from 'node:events';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult, Implementation, LoggingLevel, Prompt, Resource, ResourceTemplate, Result, ServerCapabilities, Tool } from '@modelcontextprotocol/sdk/types.js';
import { AttemptScheduler, type Trigger } from './attempt-scheduler.js';
import { CallPath } from './calls.js';
import { Catalog } from './catalog.js';
import { Connector } from './connector.js';
import { closeQuietly, forceClose, pidOf, type Connection } from './transport/connection.js';
import { classifyFailure, describeFailure, isLostSseStream, TransportClosedError } from './diagnosis.js';
import { errorText, isAuthError } from './errors.js';
import { FailureRecord } from './failure-record.js';
import { HealthMonitor } from './health.js';
import { RetryPolicy, type FailureKind, type RetryDecision } from './policy.js';
import { detailOf, msUntil, summarize, type StatusFacts } from './status-report.js';
import { LinkWatch } from './tether-link.js';
import { restartingLine } from '../util/stop-notices.js';
import { createTransport, type TransportFactory } from './transport/transports.js';
import { settleWithin } from '../util/timeouts.js';
import { resolveSupervisorOptions, type CallOptions, type Logger, type ServerDetail, type ServerHealth, type ServerKind, type ServerLists, type ServerSpec, type ServerStatus, type ServerSummary, type SupervisorEvents, type SupervisorHooks, type SupervisorOptions, type SupervisorOptionsInput } from './types.js';

export interface ServerSupervisorOptions extends SupervisorOptionsInput {
  transportFactory?: TransportFactory;
  /** [0, 1) source for backoff and health jitter; injectable for tests. */
  random?: () => number;
  logger?: Logger;
  /** clientInfo sent to the MCP server. */
  clientInfo?: Implementation;
  /** Where the server's own requests (sampling, elicitation, roots) and notifications go. */
  hooks?: SupervisorHooks;
}

/** How long stop() waits for a server to end politely before killing it. */
const STOP_BUDGET_MS = 4000;

/**
 * Keeps one configured MCP server usable: connects, watches the connection, and coordinates
 * the parts that each do one job: the retry policy (policy.ts) decides after a failure,
 * diagnosis.ts says what failed, health.ts probes, catalog.ts discovers and replays host
 * state, tether-link.ts listens to an exec server's tether client. Calls never hang: a call
 * to a server that is down triggers an immediate attempt and otherwise fails with a
 * ServerUnavailableError saying why.
 */
export class ServerSupervisor extends EventEmitter<SupervisorEvents> {
  readonly name: string;
  readonly kind: ServerKind;
  readonly options: SupervisorOptions;

  private readonly log: Logger;
  private readonly connector: Connector;
  private readonly policy: RetryPolicy;
  private readonly healthMonitor: HealthMonitor<Connection>;
  private readonly catalog: Catalog;
  private readonly calls: CallPath;
  private readonly attempts: AttemptScheduler;

  private _status: ServerStatus = 'disconnected';
  private stopped = true;
  private everConnected = false;
  /** The attempt in progress or scheduled next, counted from 1 in each streak; 0 while connected. */
  private attemptNo = 0;
  private conn: Connection | null = null;
  private readonly failures = new FailureRecord();
  private connectedAt: number | null = null;
  private lastAttemptAt: number | null = null;

  constructor(
    readonly spec: ServerSpec,
    options: ServerSupervisorOptions = {},
  ) {
    super();
    this.name = spec.name;
    this.kind = spec.kind;
    this.options = resolveSupervisorOptions(options);
    const random = options.random ?? Math.random;
    this.log = options.logger ?? (() => {});
    this.policy = new RetryPolicy(this.options, random);
    this.attempts = new AttemptScheduler((trigger) => this.attemptOnce(trigger));
    this.catalog = new Catalog(this.options.requestTimeoutMs, this.log, this.name);
    this.healthMonitor = new HealthMonitor<Connection>(this.options, {
      isCurrent: (conn) => conn === this.conn,
      isLive: (conn) => conn === this.conn && this._status === 'connected',
      clientOf: (conn) => conn.client,
      pingless: (conn) => conn.era === 'modern',
      onLinkLost: (conn, reason) => this.dropConnection(conn, reason, 'loss'),
      onDegraded: (consecutiveFailures, lastError) => this.emit('server_health_degraded', { server: this.name, consecutiveFailures, lastError }),
      onRestored: () => this.emit('server_health_restored', { server: this.name }),
    }, random, this.log, this.name);
    this.calls = new CallPath({
      name: this.name,
      requestTimeoutMs: this.options.requestTimeoutMs,
      state: () => ({ status: this._status, conn: this.conn, attempt: this.attemptNo, nextRetryMs: msUntil(this.attempts.nextRetryAt), lastError: this.lastError, permanent: this.failures.permanent }),
      attemptNow: () => this.attempts.run('call'),
      dropConnection: (conn, reason, failure) => this.dropConnection(conn, reason, failure),
    });
    this.connector = new Connector({
      spec,
      factory: options.transportFactory ?? createTransport,
      context: { name: this.name, log: this.log, clientInfo: options.clientInfo ?? { name: 'tether-gateway', version: '0.1.0' }, hooks: options.hooks ?? {} },
      connectTimeoutMs: this.options.connectTimeoutMs,
      catalog: this.catalog,
      watcher: { onClose: (c) => this.onTransportClosed(c), onError: (c, error) => this.onTransportError(c, error), onListChanged: (c, list) => void this.refresh(c, list) },
      linkListener: (conn) => new LinkWatch({ down: (reason, attempt) => this.onLinkDown(conn, reason, attempt), up: (attempt) => this.onLinkUp(conn, attempt), restarting: (keptMs) => this.onLinkDown(conn, restartingLine(keptMs), 0, true) }),
    });
  }

  get status(): ServerStatus { return this._status; }
  private get lastError(): string | null { return this.failures.lastError; }
  get health(): ServerHealth { return this.healthMonitor.health; }
  get tools(): Tool[] { return this.catalog.lists.tools; }
  get resources(): Resource[] { return this.catalog.lists.resources; }
  get prompts(): Prompt[] { return this.catalog.lists.prompts; }
  get resourceTemplates(): ResourceTemplate[] { return this.catalog.lists.resourceTemplates; }
  get serverCapabilities(): ServerCapabilities | null { return this.catalog.capabilities; }
  /** The live SDK client, when connected. */
  get client(): Client | null { return this._status === 'connected' ? (this.conn?.client ?? null) : null; }
  /** The server process id of a connected local stdio server (for operators and tests). */
  get pid(): number | null { return pidOf(this.conn); }

  /** Starts supervising; resolves when the first attempt has settled (either way). */
  async start(): Promise<void> {
    if (!this.stopped) return;
    this.stopped = false;
    this.attemptNo = 1;
    this.policy.newStreak();
    this.setStatus('connecting');
    await this.attempts.run('initial');
  }

  /**
   * Stops on purpose: closes the connection, cancels retries; status `disconnected`.
   * Bounded by `budgetMs` whatever the server does: past it, a local server's process group
   * is killed and a remote one's session closed (the tether server ends its processes).
   */
  async stop(budgetMs = STOP_BUDGET_MS): Promise<void> {
    if (this.stopped && this._status === 'disconnected') return;
    this.stopped = true;
    this.attempts.clear();
    this.healthMonitor.stop();
    const conn = this.conn;
    this.conn = null;
    this.connectedAt = null;
    const wasConnected = this._status === 'connected';
    this.setStatus('disconnected');
    // The connection, and an attempt in progress (aborted rather than waited out).
    const victims = [conn, this.connector.opening].filter((c): c is Connection => c !== null);
    for (const c of victims) c.closedByUs = true;
    const polite = Promise.all([...victims.map((c) => closeQuietly(c.client, budgetMs)), this.attempts.inflight?.catch(() => {})]);
    if (!(await settleWithin(polite, budgetMs))) this.log('warn', `[${this.name}] did not stop within ${budgetMs} ms: killing it`);
    // Always: whatever an attempt opened meanwhile, and anything left in a process group.
    for (const c of [...victims, this.connector.opening].filter((c): c is Connection => c !== null && c !== undefined)) forceClose(c);
    if (wasConnected) this.emit('server_disconnected', { server: this.name, wasIntentional: true, reason: 'stopped' });
  }

  /**
   * Manual retry (`reconnect_server`): connected → close and reconnect; reconnecting → try
   * now; failed / requires_reauth → reset the counters and try. Resolves after that attempt.
   */
  async retry(): Promise<ServerDetail> {
    if (this.attempts.inflight) {
      await this.attempts.inflight;
      if (this._status === 'connected') return this.detail();
    }
    this.stopped = false;
    this.policy.reset();
    this.failures.retrying();
    this.attempts.clear();
    const conn = this.conn;
    if (conn) {
      this.conn = null;
      this.connectedAt = null;
      this.healthMonitor.stop();
      conn.closedByUs = true;
      await closeQuietly(conn.client);
      this.emit('server_disconnected', { server: this.name, wasIntentional: true, reason: 'manual reconnect' });
    }
    this.attemptNo = 1;
    this.policy.newStreak();
    this.setStatus('reconnecting');
    this.emit('server_reconnecting', { server: this.name, attempt: this.attemptNo, nextRetryMs: 0 });
    await this.attempts.run('manual');
    return this.detail();
  }

  /** Calls a tool on this server, with the guarantees of request(). */
  async callTool(tool: string, args: Record<string, unknown> | undefined, opts: CallOptions = {}): Promise<CallToolResult> {
    return (await this.request('tools/call', { name: tool, arguments: args ?? {} }, opts)) as CallToolResult;
  }

  /**
   * Any request to this server. A server that is reconnecting or failed gets an immediate
   * attempt first (the scheduled retry is cancelled); if that fails too, the call fails with
   * a ServerUnavailableError. Bounded by `timeoutMs` (default requestTimeoutMs), progress
   * relayed; the result is passed through as the server sent it (calls.ts).
   */
  request(method: string, params: Record<string, unknown> | undefined, opts: CallOptions = {}): Promise<Result> {
    return this.calls.request(method, params, opts);
  }

  /** The log level hosts want (the most verbose one asked), for this and every later connection. */
  async setLogLevel(level: LoggingLevel | null): Promise<void> {
    this.catalog.logLevel = level;
    const conn = this.conn;
    if (level && conn && this._status === 'connected') await this.catalog.applyLogLevel(conn.client, level);
  }

  /** Subscribes to updates of one of this server's resources; kept across reconnections. */
  async subscribe(uri: string, opts: CallOptions = {}): Promise<void> {
    await this.catalog.subscribe(uri, () => this.request('resources/subscribe', { uri }, opts));
  }

  async unsubscribe(uri: string, opts: CallOptions = {}): Promise<void> {
    this.catalog.subscriptions.delete(uri);
    if (this._status !== 'connected') return; // the next connection simply does not subscribe
    await this.request('resources/unsubscribe', { uri }, opts);
  }

  /** The hosts' roots changed: tell the server, which asks for them again. */
  notifyRootsChanged(): void {
    if (this._status === 'connected') void this.conn?.client.sendRootsListChanged().catch(() => {});
  }

  // ---------------------------------------------------------------- attempts (timed and serialised by attempt-scheduler.ts)

  private async attemptOnce(trigger: Trigger): Promise<boolean> {
    const from = this._status;
    // A call's attempt on a failed server is one more attempt of the last streak.
    if (trigger === 'call' && from === 'failed') this.attemptNo += 1;
    const attemptNo = Math.max(1, this.attemptNo);
    this.lastAttemptAt = Date.now();
    this.log('debug', `[${this.name}] connection attempt ${attemptNo} (${trigger}, status ${from})`);
    const outcome = await this.connector.attempt();
    if (!outcome.ok) {
      if (this.stopped) return false;
      this.failures.fail(outcome.reason);
      this.log('warn', `[${this.name}] attempt ${attemptNo} failed (${outcome.failure}): ${this.lastError}`);
      this.afterFailure(outcome.failure, trigger === 'call' && from === 'failed');
      return false;
    }
    const conn = outcome.conn;
    if (this.stopped) {
      conn.closedByUs = true;
      await closeQuietly(conn.client);
      return false;
    }
    this.onConnected(conn);
    return true;
  }

  /**
   * exec: the link is down (tether-link.ts decides when: not for a short drop). The status is
   * `reconnecting` at once (calls fail fast saying why); the session still counts as lost
   * only when the server says it does not know it or the recovery deadline passes (an ssh
   * tunnel can come back), and a resumed session is `connected` again (onLinkUp).
   */
  private onLinkDown(conn: Connection, reason: string, attempt: number, restarting = false): void {
    if (conn !== this.conn) return;
    const first = conn.linkDown === null;
    conn.linkDown = reason;
    this.attemptNo = restarting ? 0 : attempt + 1;
    this.failures.fail(restarting ? reason : `${reason}; the session is kept until it resumes, the server no longer knows it, or the recovery deadline passes`);
    if (!first) return;
    this.healthMonitor.stop();
    this.connectedAt = null;
    this.log('warn', `[${this.name}] ${restarting ? '' : 'tether link down: '}${this.lastError}`);
    // Told "restarting" (the server restarts and keeps the session): no backoff, the client reconnects at once; until onLinkUp or a loss.
    this.setStatus(restarting ? 'restarting' : 'reconnecting');
    this.emit('server_disconnected', { server: this.name, wasIntentional: false, reason: this.lastError ?? undefined });
  }

  private onLinkUp(conn: Connection, attempt: number): void {
    if (conn !== this.conn || conn.linkDown === null) return;
    conn.linkDown = null;
    this.attemptNo = 0;
    this.failures.connected();
    this.connectedAt = Date.now();
    this.setStatus('connected');
    this.log('info', `[${this.name}] tether session resumed`);
    this.emit('server_reconnected', { server: this.name, attemptsTaken: Math.max(1, attempt), capabilities: this.catalog.capabilities });
    this.healthMonitor.schedule(conn);
  }

  /** Applies the retry policy to a failure (`staysFailed`: a call's attempt on a failed server). */
  private afterFailure(failure: FailureKind, staysFailed: boolean): void {
    const decision: RetryDecision = this.policy.onFailure(failure, this.lastError, staysFailed);
    if (decision.action === 'schedule') this.schedule(decision.delayMs);
    else if (decision.action === 'stop') this.enterStopped(decision.status, decision.reason, decision.permanent);
  }

  /** Schedules the next attempt (number attemptNo+1) after `delayMs`. */
  private schedule(delayMs: number): void {
    this.attempts.schedule(delayMs);
    this.attemptNo += 1;
    this.setStatus('reconnecting');
    this.emit('server_reconnecting', { server: this.name, attempt: this.attemptNo, nextRetryMs: delayMs });
  }

  private enterStopped(status: 'failed' | 'requires_reauth', reason: string, permanent = false): void {
    this.attempts.clear();
    this.failures.stop(reason, permanent);
    this.setStatus(status);
    this.log('error', `[${this.name}] ${status}: ${reason}`);
    this.emit('server_failed', { server: this.name, reason, status });
  }

  private onConnected(conn: Connection): void {
    const attemptsTaken = Math.max(1, this.attemptNo);
    const reconnect = this.everConnected;
    this.conn = conn;
    // What it wrote while starting (a banner) explains nothing of a later end: only what follows does.
    conn.stderrTail = '';
    this.everConnected = true;
    this.connectedAt = Date.now();
    this.attemptNo = 0;
    this.policy.newStreak();
    this.attempts.clear();
    this.failures.connected();
    // Initialize and discovery answered: that is the first health check.
    const wasDegraded = this.healthMonitor.connected(this.connectedAt);
    this.setStatus('connected');
    this.log('info', `[${this.name}] connected (${this.catalog.lists.tools.length} tools)`);
    const capabilities = this.catalog.capabilities;
    if (reconnect) this.emit('server_reconnected', { server: this.name, attemptsTaken, capabilities });
    else this.emit('server_connected', { server: this.name, capabilities });
    if (wasDegraded) this.emit('server_health_restored', { server: this.name });
    this.announceChanges();
    this.healthMonitor.schedule(conn);
  }

  /** Lists that changed since last announced: `list_changed` each, `tools_list_changed` for tools. */
  private announceChanges(): void {
    for (const list of this.catalog.takeChanges()) {
      this.emit('list_changed', { server: this.name, list });
      if (list === 'tools') this.emit('tools_list_changed', { server: this.name, tools: this.catalog.lists.tools.map((t) => t.name) });
    }
  }

  private async refresh(conn: Connection, list: keyof ServerLists): Promise<void> {
    if (conn !== this.conn) return;
    await this.catalog.refresh(conn.client, list);
    if (conn === this.conn) this.announceChanges();
  }

  /** Errors no call has seen yet: the HTTP transport's SSE stream lost, or credentials refused. */
  private onTransportError(conn: Connection, error: Error): void {
    if (conn !== this.conn) return;
    if (isLostSseStream(error)) this.dropConnection(conn, errorText(error), 'loss');
    else if (isAuthError(error)) this.dropConnection(conn, errorText(error), 'auth');
  }

  /** The transport closed. Ours to ignore if we closed it; otherwise a crash or a loss. */
  private onTransportClosed(conn: Connection): void {
    if (conn !== this.conn || conn.closedByUs) return;
    const error = conn.errors.at(-1) ?? new TransportClosedError(this.kind);
    const failure = classifyFailure(this.kind, error, conn);
    this.dropConnection(conn, describeFailure(this.spec, error, conn, failure), failure);
  }

  /** Takes a live connection down after a loss we detected, then applies the policy. */
  private dropConnection(conn: Connection, reason: string, failure: FailureKind): void {
    if (conn !== this.conn) return;
    this.conn = null;
    this.connectedAt = null;
    this.healthMonitor.stop();
    if (!conn.closed) {
      conn.closedByUs = true;
      void closeQuietly(conn.client);
    }
    this.failures.fail(reason);
    this.attemptNo = 0;
    this.policy.newStreak();
    this.log('warn', `[${this.name}] connection lost (${failure}): ${reason}`);
    // A tether link already reported down was announced then: one disconnection, one event.
    if (conn.linkDown === null) this.emit('server_disconnected', { server: this.name, wasIntentional: false, reason });
    if (this.stopped) return;
    this.afterFailure(failure, false);
  }

  // ---------------------------------------------------------------- status

  private setStatus(status: ServerStatus): void {
    const previous = this._status;
    if (previous === status) return;
    this._status = status;
    this.emit('status', { server: this.name, status, previous });
  }

  summary(): ServerSummary { return summarize(this.facts()); }
  detail(): ServerDetail { return detailOf(this.facts()); }

  private facts(): StatusFacts {
    const { name, kind, _status: status, attemptNo: attempt, failures, connectedAt, lastAttemptAt, pid, catalog, policy } = this;
    return { name, kind, status, attempt, nextRetryAt: this.attempts.nextRetryAt, failures, connectedAt, lastAttemptAt, pid, maxRetries: this.options.maxRetries, health: this.healthMonitor, catalog, policy, era: this.connector.era };
  }
}
