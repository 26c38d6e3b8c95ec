import { EventEmitter } from 'node:events';
import type { Readable } from 'node:stream';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  PromptListChangedNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ResultSchema,
  ToolListChangedNotificationSchema,
  type CallToolResult,
  type LoggingLevel,
  type Result,
  type Implementation,
  type Progress,
  type Prompt,
  type Resource,
  type ResourceTemplate,
  type ServerCapabilities,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { applyJitter, backoffDelay } from '../util/backoff.js';
import { CrashWindow } from './crash-window.js';
import { errorText, isAuthError, isConnectionClosed, isMethodNotFound, isRefusal, isTransportLoss, ServerUnavailableError } from './errors.js';
import { STDERR_KEEP_BYTES, summarizeStderr } from './stderr-summary.js';
import { createTransport, describeExit, type TransportFactory } from './transports.js';
import { settleWithin, withTimeout } from '../util/timeouts.js';
import {
  resolveSupervisorOptions,
  type Logger,
  type ServerDetail,
  type ServerHealth,
  type ServerKind,
  type ServerLists,
  type SupervisorHooks,
  type ServerSpec,
  type ServerStatus,
  type ServerSummary,
  type SupervisorEvents,
  type SupervisorOptions,
  type SupervisorOptionsInput,
} from './types.js';

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

/**
 * What the gateway offers every server as an MCP client: it forwards sampling and
 * elicitation to its hosts and answers roots with theirs (src/gateway decides which host).
 * Declared always, so servers that register tools by client capability show them all.
 */
const CLIENT_CAPABILITIES = { sampling: {}, elicitation: { form: {}, url: {} }, roots: { listChanged: true } };

export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
  /** Progress the server reports; each report also restarts the timeout (long tools stay alive). */
  onprogress?: (progress: Progress) => void;
}

/** One live (or dying) connection: a fresh SDK Client over a fresh transport. */
interface Connection {
  id: number;
  client: Client;
  transport: Transport;
  /** We closed it (stop, forced reconnect, or after detecting a loss ourselves). */
  closedByUs: boolean;
  /** The transport reported close. */
  closed: boolean;
  /** Errors the transport reported, newest last; they explain a close (auth? session lost?). */
  errors: Error[];
  /** The last STDERR_KEEP_BYTES the server wrote to stderr; they explain a crash. */
  stderrTail: string;
  /** The first lines the server wrote to stdout that were not JSON-RPC. */
  invalidStdout: string[];
  /**
   * exec: the tether server refuses the connection while the session may still resume
   * (the reason), or null. The connection is kept; the status says `reconnecting`.
   */
  linkDown: string | null;
}

type Trigger = 'initial' | 'retry' | 'call' | 'manual';
type FailureKind = 'auth' | 'crash' | 'loss';

/** Non-JSON stdout lines kept per connection to explain a server that never answers. */
const INVALID_STDOUT_KEPT = 3;
/** How long stop() waits for a server to end politely before killing it. */
const STOP_BUDGET_MS = 4000;

/**
 * Keeps one configured MCP server usable: connects, watches the connection, reconnects with
 * backoff after a loss, restarts a crashed stdio/exec server at once (until it crashes too
 * often), stops on authorization errors, probes health, and re-discovers tools/resources/
 * prompts after every connection. Calls never hang: a call to a server that is down triggers
 * an immediate attempt and otherwise fails with a ServerUnavailableError saying why.
 */
export class ServerSupervisor extends EventEmitter<SupervisorEvents> {
  readonly name: string;
  readonly kind: ServerKind;
  readonly options: SupervisorOptions;

  private readonly factory: TransportFactory;
  private readonly random: () => number;
  private readonly log: Logger;
  private readonly clientInfo: Implementation;
  private readonly crashes: CrashWindow;

  private _status: ServerStatus = 'disconnected';
  /** `unknown` until a first check (a connection that initializes and lists is one). */
  private _health: ServerHealth = 'unknown';
  private stopped = true;
  private everConnected = false;
  /**
   * The attempt in progress or scheduled next, counted from 1 in each streak (the first
   * connection, or the attempts after a loss); 0 while connected.
   */
  private attemptNo = 0;
  /** Failures in the current streak (a loss counts as one): the backoff exponent. */
  private streakFailures = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private nextRetryAt: number | null = null;
  private inflight: Promise<boolean> | null = null;
  private conn: Connection | null = null;
  /** The connection an attempt is opening, so stop() can abort it instead of waiting. */
  private opening: Connection | null = null;
  private connSeq = 0;
  private lastError: string | null = null;
  private connectedAt: number | null = null;

  private healthTimer: NodeJS.Timeout | undefined;
  private consecutiveHealthFailures = 0;
  private lastHealthError: string | null = null;
  private lastHealthCheckAt: number | null = null;
  private pingUnsupported = false;

  private capabilities: ServerCapabilities | null = null;
  private serverInfo: Implementation | null = null;
  private lists: ServerLists = { tools: [], resources: [], resourceTemplates: [], prompts: [] };
  /** Lists that differ from what was last announced. */
  private pendingChanges = new Set<keyof ServerLists>();
  private readonly hooks: SupervisorHooks;
  /** The log level hosts asked for (applied to every connection), or null for the server's default. */
  private logLevel: LoggingLevel | null = null;
  /** Resource URIs (the server's own) hosts subscribed to: subscribed again on every connection. */
  private readonly subscriptions = new Set<string>();
  private lastAttemptAt: number | null = null;

  constructor(
    readonly spec: ServerSpec,
    options: ServerSupervisorOptions = {},
  ) {
    super();
    this.name = spec.name;
    this.kind = spec.kind;
    this.options = resolveSupervisorOptions(options);
    this.factory = options.transportFactory ?? createTransport;
    this.random = options.random ?? Math.random;
    this.log = options.logger ?? (() => {});
    this.clientInfo = options.clientInfo ?? { name: 'tether-gateway', version: '0.1.0' };
    this.crashes = new CrashWindow(this.options.crashLimit, this.options.crashWindowMs);
    this.hooks = options.hooks ?? {};
  }

  get status(): ServerStatus {
    return this._status;
  }

  get health(): ServerHealth {
    return this._health;
  }

  get tools(): Tool[] {
    return this.lists.tools;
  }

  get resources(): Resource[] {
    return this.lists.resources;
  }

  get prompts(): Prompt[] {
    return this.lists.prompts;
  }

  get resourceTemplates(): ResourceTemplate[] {
    return this.lists.resourceTemplates;
  }

  get serverCapabilities(): ServerCapabilities | null {
    return this.capabilities;
  }

  /** The live SDK client, when connected. */
  get client(): Client | null {
    return this._status === 'connected' ? (this.conn?.client ?? null) : null;
  }

  /** Starts supervising; resolves when the first attempt has settled (either way). */
  async start(): Promise<void> {
    if (!this.stopped) return;
    this.stopped = false;
    this.attemptNo = 1;
    this.streakFailures = 0;
    this.setStatus('connecting');
    await this.runAttempt('initial');
  }

  /**
   * Stops on purpose: closes the connection, cancels retries; status `disconnected`.
   * Bounded by `budgetMs` whatever the server does: past it, a local server's process group
   * is killed and a remote one's session closed (the tether server ends its processes).
   */
  async stop(budgetMs = STOP_BUDGET_MS): Promise<void> {
    if (this.stopped && this._status === 'disconnected') return;
    this.stopped = true;
    this.clearRetry();
    this.stopHealth();
    const conn = this.conn;
    this.conn = null;
    this.connectedAt = null;
    const wasConnected = this._status === 'connected';
    this.setStatus('disconnected');
    // The connection, and an attempt in progress (aborted rather than waited out).
    const opening = this.opening;
    const victims = [conn, opening].filter((c): c is Connection => c !== null);
    for (const c of victims) c.closedByUs = true;
    const polite = Promise.all([...victims.map((c) => closeQuietly(c.client, budgetMs)), this.inflight?.catch(() => {})]);
    if (!(await settleWithin(polite, budgetMs))) {
      this.log('warn', `[${this.name}] did not stop within ${budgetMs} ms: killing it`);
    }
    // Always: whatever an attempt opened meanwhile, and anything left in a process group.
    for (const c of [...victims, this.opening].filter((c): c is Connection => c !== null && c !== undefined)) forceClose(c);
    if (wasConnected) this.emit('server_disconnected', { server: this.name, wasIntentional: true, reason: 'stopped' });
  }

  /**
   * Manual retry (`reconnect_server`): connected → close and reconnect; reconnecting → try
   * now; failed / requires_reauth → reset the counters and try. Resolves after that attempt.
   */
  async retry(): Promise<ServerDetail> {
    if (this.inflight) {
      await this.inflight;
      if (this._status === 'connected') return this.detail();
    }
    this.stopped = false;
    this.crashes.reset();
    this.clearRetry();
    const conn = this.conn;
    if (conn) {
      this.conn = null;
      this.connectedAt = null;
      this.stopHealth();
      conn.closedByUs = true;
      await closeQuietly(conn.client);
      this.emit('server_disconnected', { server: this.name, wasIntentional: true, reason: 'manual reconnect' });
    }
    this.attemptNo = 1;
    this.streakFailures = 0;
    this.setStatus('reconnecting');
    this.emit('server_reconnecting', { server: this.name, attempt: this.attemptNo, nextRetryMs: 0 });
    await this.runAttempt('manual');
    return this.detail();
  }

  /**
   * Calls a tool on this server. A server that is reconnecting or failed gets an immediate
   * attempt first (the scheduled retry is cancelled); if that fails too, the call fails with
   * a ServerUnavailableError. Bounded by `timeoutMs` (default requestTimeoutMs).
   */
  async callTool(tool: string, args: Record<string, unknown> | undefined, opts: CallOptions = {}): Promise<CallToolResult> {
    return (await this.request('tools/call', { name: tool, arguments: args ?? {} }, opts)) as CallToolResult;
  }

  /**
   * Any request to this server (prompts/get, resources/read, completion/complete…), with the
   * guarantees of callTool: an immediate attempt when down, bounded, progress relayed. The
   * result is passed through as the server sent it.
   */
  async request(method: string, params: Record<string, unknown> | undefined, opts: CallOptions = {}): Promise<Result> {
    for (let round = 0; ; round++) {
      const conn = await this.ensureConnected();
      try {
        return await conn.client.request({ method, params } as never, ResultSchema, {
          timeout: opts.timeoutMs ?? this.options.requestTimeoutMs,
          signal: opts.signal,
          ...(opts.onprogress ? { onprogress: opts.onprogress, resetTimeoutOnProgress: true } : {}),
        });
      } catch (err) {
        this.noteCallFailure(conn, err);
        // A request the server provably never ran (its HTTP session was gone) is safe to send
        // again once, on a fresh connection: a restarted HTTP server then costs the caller nothing.
        if (round === 0 && this.conn !== conn && isUndelivered(err) && !opts.signal?.aborted) continue;
        // The connection is gone (the SDK runs onclose before failing pending calls): say so
        // with the supervisor's view, not just the raw error.
        if (this.conn !== conn) throw this.unavailable(this.lastError ?? errorText(err));
        throw err;
      }
    }
  }

  /** The server process id of a connected local stdio server (for operators and tests). */
  get pid(): number | null {
    const pid = (this.conn?.transport as { pid?: unknown } | undefined)?.pid;
    return typeof pid === 'number' ? pid : null;
  }

  /** Resolves with a live connection or throws ServerUnavailableError; never waits unboundedly. */
  private async ensureConnected(): Promise<Connection> {
    if (this._status === 'connected' && this.conn) return this.conn;
    // The tether server refuses connections: say so now rather than wait for the session's
    // recovery deadline (a new session would not help while nobody listens).
    if (this.conn?.linkDown) throw this.unavailable();
    if (this._status === 'connecting' || this._status === 'reconnecting' || this._status === 'failed') {
      // Joins the attempt in flight, or cancels the scheduled retry and tries at once: one
      // attempt per call, bounded by connectTimeoutMs.
      await this.runAttempt('call');
      // (re-read: the attempt changed the status)
      if ((this._status as ServerStatus) === 'connected' && this.conn) return this.conn;
    }
    throw this.unavailable();
  }

  private unavailable(lastError?: string): ServerUnavailableError {
    return new ServerUnavailableError(this.name, this._status, this.attemptNo, this.nextRetryMs(), lastError ?? this.lastError);
  }

  private nextRetryMs(): number | null {
    return this.nextRetryAt === null ? null : Math.max(0, this.nextRetryAt - Date.now());
  }

  /** A real call failed: an authorization error or a broken transport means reconnect policy applies. */
  private noteCallFailure(conn: Connection, err: unknown): void {
    if (conn !== this.conn) return;
    if (isAuthError(err)) {
      this.dropConnection(conn, errorText(err), 'auth');
    } else if (isTransportLoss(err) && !isConnectionClosed(err)) {
      // ConnectionClosed is left to the transport's own close, which knows whether it was a crash.
      this.dropConnection(conn, errorText(err), 'loss');
    }
  }

  // ---------------------------------------------------------------- attempts

  /** At most one attempt in flight: a second caller joins the first. */
  private runAttempt(trigger: Trigger): Promise<boolean> {
    if (this.inflight) return this.inflight;
    this.clearRetry();
    const attempt = this.attemptOnce(trigger).finally(() => {
      if (this.inflight === attempt) this.inflight = null;
    });
    this.inflight = attempt;
    return attempt;
  }

  private async attemptOnce(trigger: Trigger): Promise<boolean> {
    const from = this._status;
    // A call's attempt on a failed server is one more attempt of the last streak.
    if (trigger === 'call' && from === 'failed') this.attemptNo += 1;
    const attemptNo = Math.max(1, this.attemptNo);
    this.lastAttemptAt = Date.now();
    this.log('debug', `[${this.name}] connection attempt ${attemptNo} (${trigger}, status ${from})`);
    let conn: Connection | undefined;
    try {
      conn = await this.openConnection();
      await this.discover(conn);
      if (conn.closed) throw conn.errors.at(-1) ?? new Error('connection closed during discovery');
    } catch (err) {
      conn ??= (err as { connection?: Connection } | undefined)?.connection;
      const failure = this.classify(err, conn);
      if (conn && !conn.closedByUs) {
        conn.closedByUs = true;
        void closeQuietly(conn.client);
      }
      if (this.stopped) return false;
      this.lastError = this.describeFailure(err, conn, failure);
      this.log('warn', `[${this.name}] attempt ${attemptNo} failed (${failure}): ${this.lastError}`);
      this.afterFailure(failure, trigger === 'call' && from === 'failed');
      return false;
    }
    if (this.stopped) {
      conn.closedByUs = true;
      await closeQuietly(conn.client);
      return false;
    }
    this.onConnected(conn);
    return true;
  }

  /** Creates transport + client and runs initialize, all bounded by connectTimeoutMs. */
  private async openConnection(): Promise<Connection> {
    const transport = await this.factory(this.spec);
    const client = new Client(this.clientInfo, { capabilities: CLIENT_CAPABILITIES });
    const conn: Connection = { id: ++this.connSeq, client, transport, closedByUs: false, closed: false, errors: [], stderrTail: '', invalidStdout: [], linkDown: null };
    this.tailStderr(conn);
    client.onclose = () => {
      conn.closed = true;
      this.onTransportClosed(conn);
    };
    client.onerror = (error) => {
      const badLine = /^MCP server wrote a line that is (?:not JSON|not a JSON-RPC message): ([^]*)$/.exec(error.message);
      if (badLine) {
        // Not a transport problem, but the likeliest reason a server never answers.
        if (conn.invalidStdout.length < INVALID_STDOUT_KEPT) conn.invalidStdout.push(badLine[1]!);
        this.log('debug', `[${this.name}] ${error.message}`);
        return;
      }
      conn.errors.push(error);
      if (conn.errors.length > 10) conn.errors.shift();
      if (conn !== this.conn) return;
      // The HTTP transport reports trouble on its SSE stream only here: a 404 means the server
      // forgot our session (it restarted); giving up its retries means the server is gone.
      // Either way the connection is lost even though no call has failed yet.
      // (A 404 answering a POST is left to the call that made it: it may resend once.)
      if ((isUndelivered(error) && /SSE stream/.test(error.message)) || /Maximum reconnection attempts/.test(error.message)) {
        this.dropConnection(conn, errorText(error), 'loss');
      }
      else if (isAuthError(error)) this.dropConnection(conn, errorText(error), 'auth');
    };
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => void this.refresh(conn, 'tools'));
    client.setNotificationHandler(ResourceListChangedNotificationSchema, () => void this.refresh(conn, 'resources'));
    client.setNotificationHandler(PromptListChangedNotificationSchema, () => void this.refresh(conn, 'prompts'));
    // The server's own requests and notifications go to the gateway (its hosts).
    const noHost = (what: string) => () => Promise.reject(Object.assign(new Error(`no host to answer ${what}: this server is not behind a gateway`), { code: -32601 }));
    client.setRequestHandler(CreateMessageRequestSchema, (req, extra) => (this.hooks.onRequest ?? noHost('sampling'))(this.name, req, extra) as never);
    client.setRequestHandler(ElicitRequestSchema, (req, extra) => (this.hooks.onRequest ?? noHost('elicitation'))(this.name, req, extra) as never);
    client.setRequestHandler(ListRootsRequestSchema, (req, extra) => (this.hooks.onRequest ? this.hooks.onRequest(this.name, req, extra) : Promise.resolve({ roots: [] })) as never);
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => this.hooks.onNotification?.(this.name, n));
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => this.hooks.onNotification?.(this.name, n));
    const timeoutMs = this.options.connectTimeoutMs;
    this.opening = conn;
    try {
      await withTimeout(client.connect(transport, { timeout: timeoutMs }), timeoutMs, 'connection attempt');
    } catch (err) {
      // The caller needs the half-open connection to classify the failure and close it.
      throw Object.assign(err instanceof Error ? err : new Error(String(err)), { connection: conn });
    } finally {
      if (this.opening === conn) this.opening = null;
    }
    if (this.kind === 'exec') this.watchTetherLink(conn);
    return conn;
  }

  /**
   * exec: the tether client hides short drops, but a tether server that refuses connections
   * is not a short drop. The first refused recovery attempt makes the status `reconnecting`
   * (calls fail fast saying why); the session still counts as lost only when the server
   * says it does not know it or the recovery deadline passes (a refused connection can be
   * an ssh tunnel coming back), and a resumed session is `connected` again.
   */
  private watchTetherLink(conn: Connection): void {
    const execClient = (conn.transport as { client?: import('node:events').EventEmitter }).client;
    if (!execClient || typeof execClient.on !== 'function') return;
    execClient.on('retry', (e: { attempt: number; error: Error }) => {
      if (conn !== this.conn || !isRefusal(e.error)) return;
      const first = conn.linkDown === null;
      conn.linkDown = errorText(e.error);
      this.attemptNo = e.attempt + 1;
      this.lastError = `the tether server refuses connections (${conn.linkDown}); the session is kept until it resumes, the server no longer knows it, or the recovery deadline passes`;
      if (!first) return;
      this.stopHealth();
      this.connectedAt = null;
      this.log('warn', `[${this.name}] tether link down: ${this.lastError}`);
      this.setStatus('reconnecting');
      this.emit('server_disconnected', { server: this.name, wasIntentional: false, reason: this.lastError });
    });
    execClient.on('state', (change: { state: string; attempt: number }) => {
      if (conn !== this.conn || change.state !== 'connected' || conn.linkDown === null) return;
      conn.linkDown = null;
      const attemptsTaken = Math.max(1, change.attempt);
      this.attemptNo = 0;
      this.lastError = null;
      this.connectedAt = Date.now();
      this.setStatus('connected');
      this.log('info', `[${this.name}] tether session resumed`);
      this.emit('server_reconnected', { server: this.name, attemptsTaken, capabilities: this.capabilities });
      this.scheduleHealth(conn);
    });
  }

  private tailStderr(conn: Connection): void {
    const stderr = (conn.transport as { stderr?: Readable | null }).stderr;
    if (!stderr || typeof stderr.on !== 'function') return;
    let partial = '';
    stderr.setEncoding?.('utf8');
    stderr.on('data', (chunk: string | Buffer) => {
      const text = chunk.toString();
      conn.stderrTail = (conn.stderrTail + text).slice(-STDERR_KEEP_BYTES);
      const lines = (partial + text).split('\n');
      partial = (lines.pop() ?? '').slice(-STDERR_KEEP_BYTES);
      for (const line of lines) if (line.trim()) this.log('debug', `[${this.name}] stderr: ${line}`);
    });
    stderr.on('error', () => {});
  }

  /** Why an attempt failed, for the retry policy. */
  private classify(err: unknown, conn: Connection | undefined): FailureKind {
    const errors = [err, ...(conn?.errors ?? [])];
    if (errors.some(isAuthError)) return 'auth';
    if (this.kind === 'http') return 'loss';
    // exec: an unreachable tether server or a lost session is a loss, not a crash of the MCP server.
    if (this.kind === 'exec' && errors.some(isRemoteLoss)) return 'loss';
    // exec: the tether server answered, but could not start the command (missing binary,
    // bad cwd): the same failure as a local spawn error, so the same crash policy.
    if (this.kind === 'exec' && errors.some((e) => (e as Error | undefined)?.name === 'RpcError')) return 'crash';
    const code = (err as { code?: unknown } | undefined)?.code;
    if (code === 'ENOENT' || code === 'EACCES') return 'crash';
    if (conn?.closed && !conn.closedByUs) return 'crash';
    if (isConnectionClosed(err)) return 'crash';
    return 'loss';
  }

  private describeFailure(err: unknown, conn: Connection | undefined, failure: FailureKind): string {
    const exit = conn ? describeExit(conn.transport) : null;
    const remoteExit = err instanceof Error && err.name === 'ServerProcessExitedError' ? /^remote MCP server process exited with code \d+/.exec(err.message)?.[0] : undefined;
    // "Connection closed" says nothing when we know how the process ended.
    const spawnRefused = this.spec.kind === 'exec' && err instanceof Error && err.name === 'RpcError';
    // A tether server's message names the command (or the cwd) itself: not twice.
    const refusal = spawnRefused ? errorText(err) : '';
    const text = spawnRefused
      ? refusal.startsWith('cannot start ')
        ? `the tether server ${refusal}`
        : `the tether server could not start ${JSON.stringify(this.spec.command)}: ${refusal}`
      : (remoteExit ?? (exit && (isConnectionClosed(err) || /server process exited|Not connected/.test(errorText(err))) ? exit : errorText(err)));
    const parts = [text];
    // A server's stderr usually says why it died or hangs (missing key, bad flag): the error
    // lines, not merely the last line.
    // (Only when the server itself is the suspect: a crash, or an attempt it never answered;
    // a lost link or session says nothing about the server.)
    const suspect = failure === 'crash' || /timed out/.test(text);
    const said = conn && suspect ? summarizeStderr(conn.stderrTail) : null;
    if (said && !text.includes(said)) parts.push(`stderr: ${said}`);
    if (conn?.invalidStdout.length) {
      parts.push(`the server wrote non-JSON to stdout, where MCP allows only JSON-RPC messages (log to stderr instead): ${conn.invalidStdout.map((l) => JSON.stringify(l.length > 120 ? `${l.slice(0, 120)}…` : l)).join(', ')}`);
    }
    const full = parts.join('; ');
    return full.length > 1000 ? `${full.slice(0, 997)}...` : full;
  }

  /**
   * Applies the policy to a failure. `staysFailed`: a call-triggered attempt on a failed server
   * does not restart the retry loop.
   */
  private afterFailure(failure: FailureKind, staysFailed: boolean): void {
    this.streakFailures += 1;
    if (failure === 'auth') {
      this.enterStopped('requires_reauth', `authorization failed: ${this.lastError}`);
      return;
    }
    if (failure === 'crash') {
      const limitReached = this.crashes.record();
      if (staysFailed) return; // already failed and announced: a call's probe adds no event
      if (limitReached) {
        this.enterStopped('failed', `crashed ${this.crashes.count} times within ${Math.round(this.options.crashWindowMs / 1000)} s; last: ${this.lastError}`);
        return;
      }
      // A crash is restarted at once, not after a backoff.
      this.schedule(0);
      return;
    }
    if (staysFailed) return;
    const max = this.options.maxRetries;
    // Every failure of a streak but the first was a retry.
    const retries = this.streakFailures - 1;
    if (max !== undefined && retries >= max) {
      this.enterStopped('failed', `gave up after ${retries} ${retries === 1 ? 'retry' : 'retries'}: ${this.lastError}`);
      return;
    }
    this.schedule(backoffDelay(this.streakFailures, this.options.backoff, this.random));
  }

  /** Schedules the next attempt (number attemptNo+1) after `delayMs`. */
  private schedule(delayMs: number): void {
    this.clearRetry();
    this.attemptNo += 1;
    this.setStatus('reconnecting');
    this.nextRetryAt = Date.now() + delayMs;
    this.emit('server_reconnecting', { server: this.name, attempt: this.attemptNo, nextRetryMs: delayMs });
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      void this.runAttempt('retry');
    }, delayMs);
  }

  private clearRetry(): void {
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    this.nextRetryAt = null;
  }

  private enterStopped(status: 'failed' | 'requires_reauth', reason: string): void {
    this.clearRetry();
    this.setStatus(status);
    this.log('error', `[${this.name}] ${status}: ${reason}`);
    this.emit('server_failed', { server: this.name, reason, status });
  }

  private onConnected(conn: Connection): void {
    const attemptsTaken = Math.max(1, this.attemptNo);
    const reconnect = this.everConnected;
    this.conn = conn;
    this.everConnected = true;
    this.connectedAt = Date.now();
    this.attemptNo = 0;
    this.streakFailures = 0;
    this.clearRetry();
    this.lastError = null;
    const wasDegraded = this._health === 'degraded';
    // Initialize and discovery answered: that is the first health check.
    this._health = 'healthy';
    this.lastHealthCheckAt = this.connectedAt;
    this.consecutiveHealthFailures = 0;
    this.pingUnsupported = false;
    this.setStatus('connected');
    this.log('info', `[${this.name}] connected (${this.lists.tools.length} tools)`);
    if (reconnect) this.emit('server_reconnected', { server: this.name, attemptsTaken, capabilities: this.capabilities });
    else this.emit('server_connected', { server: this.name, capabilities: this.capabilities });
    if (wasDegraded) this.emit('server_health_restored', { server: this.name });
    this.announceChanges();
    this.scheduleHealth(conn);
  }

  /** Lists that changed since last announced: `list_changed` each, `tools_list_changed` for tools. */
  private announceChanges(): void {
    const changed = [...this.pendingChanges];
    this.pendingChanges.clear();
    for (const list of changed) {
      this.emit('list_changed', { server: this.name, list });
      if (list === 'tools') this.emit('tools_list_changed', { server: this.name, tools: this.lists.tools.map((t) => t.name) });
    }
  }

  /** The transport closed. Ours to ignore if we closed it; otherwise a crash or a loss. */
  private onTransportClosed(conn: Connection): void {
    if (conn !== this.conn || conn.closedByUs) return;
    const error = conn.errors.at(-1) ?? new Error(this.kind === 'http' ? 'connection closed' : 'server process exited');
    const failure = this.classify(error, conn);
    this.dropConnection(conn, this.describeFailure(error, conn, failure), failure);
  }

  /** Takes a live connection down after a loss we detected, then applies the policy. */
  private dropConnection(conn: Connection, reason: string, failure: FailureKind): void {
    if (conn !== this.conn) return;
    this.conn = null;
    this.connectedAt = null;
    this.stopHealth();
    if (!conn.closed) {
      conn.closedByUs = true;
      void closeQuietly(conn.client);
    }
    this.lastError = reason;
    this.attemptNo = 0;
    this.streakFailures = 0;
    this.log('warn', `[${this.name}] connection lost (${failure}): ${reason}`);
    // A tether link already reported down was announced then: one disconnection, one event.
    if (conn.linkDown === null) this.emit('server_disconnected', { server: this.name, wasIntentional: false, reason });
    if (this.stopped) return;
    this.afterFailure(failure, false);
  }

  // ---------------------------------------------------------------- discovery

  /** Capabilities and lists after (re)connection; a failed list keeps the last known one. */
  private async discover(conn: Connection): Promise<void> {
    this.capabilities = conn.client.getServerCapabilities() ?? null;
    this.serverInfo = conn.client.getServerVersion() ?? null;
    await Promise.all([this.fetchList(conn, 'tools'), this.fetchList(conn, 'resources'), this.fetchList(conn, 'resourceTemplates'), this.fetchList(conn, 'prompts')]);
    await this.restoreHostState(conn);
  }

  /** What hosts asked of the previous connection, asked again of this one (best effort). */
  private async restoreHostState(conn: Connection): Promise<void> {
    const caps = conn.client.getServerCapabilities();
    const opts = { timeout: this.options.requestTimeoutMs };
    const work: Promise<unknown>[] = [];
    if (this.logLevel && caps?.logging) work.push(conn.client.setLoggingLevel(this.logLevel, opts));
    if (caps?.resources?.subscribe) for (const uri of this.subscriptions) work.push(conn.client.subscribeResource({ uri }, opts));
    const results = await Promise.allSettled(work);
    for (const r of results) if (r.status === 'rejected') this.log('warn', `[${this.name}] restoring log level / subscriptions: ${errorText(r.reason)}`);
  }

  /** The log level hosts want (the most verbose one asked), for this and every later connection. */
  async setLogLevel(level: LoggingLevel | null): Promise<void> {
    this.logLevel = level;
    const conn = this.conn;
    if (level && conn && this._status === 'connected' && conn.client.getServerCapabilities()?.logging) {
      await conn.client.setLoggingLevel(level, { timeout: this.options.requestTimeoutMs }).catch((err: unknown) => {
        this.log('warn', `[${this.name}] logging/setLevel ${level}: ${errorText(err)}`);
      });
    }
  }

  /** Subscribes to updates of one of this server's resources; kept across reconnections. */
  async subscribe(uri: string, opts: CallOptions = {}): Promise<void> {
    const had = this.subscriptions.has(uri);
    this.subscriptions.add(uri);
    try {
      await this.request('resources/subscribe', { uri }, opts);
    } catch (err) {
      if (!had) this.subscriptions.delete(uri);
      throw err;
    }
  }

  async unsubscribe(uri: string, opts: CallOptions = {}): Promise<void> {
    this.subscriptions.delete(uri);
    if (this._status !== 'connected') return; // the next connection simply does not subscribe
    await this.request('resources/unsubscribe', { uri }, opts);
  }

  /** The hosts' roots changed: tell the server, which asks for them again. */
  notifyRootsChanged(): void {
    if (this._status === 'connected') void this.conn?.client.sendRootsListChanged().catch(() => {});
  }

  private async refresh(conn: Connection, list: keyof ServerLists): Promise<void> {
    if (conn !== this.conn) return;
    await this.fetchList(conn, list);
    // A resource list change can come with new templates too.
    if (list === 'resources') await this.fetchList(conn, 'resourceTemplates');
    if (conn === this.conn) this.announceChanges();
  }

  private async fetchList(conn: Connection, list: keyof ServerLists): Promise<void> {
    const caps = conn.client.getServerCapabilities();
    if (!caps?.[list === 'resourceTemplates' ? 'resources' : list]) {
      this.setList(list, []);
      return;
    }
    const opts = { timeout: this.options.requestTimeoutMs };
    try {
      const items: unknown[] = [];
      let cursor: string | undefined;
      // Bounded pagination: a server that keeps returning cursors cannot loop us forever.
      for (let page = 0; page < 100; page++) {
        const params = cursor ? { cursor } : undefined;
        const res =
          list === 'tools'
            ? await conn.client.listTools(params, opts).then((r) => ({ items: r.tools, next: r.nextCursor }))
            : list === 'resources'
              ? await conn.client.listResources(params, opts).then((r) => ({ items: r.resources, next: r.nextCursor }))
              : list === 'resourceTemplates'
                ? await conn.client.listResourceTemplates(params, opts).then((r) => ({ items: r.resourceTemplates, next: r.nextCursor }))
                : await conn.client.listPrompts(params, opts).then((r) => ({ items: r.prompts, next: r.nextCursor }));
        items.push(...res.items);
        cursor = res.next;
        if (!cursor) break;
      }
      this.setList(list, items as never[]);
    } catch (err) {
      this.log('warn', `[${this.name}] ${list}/list failed, keeping the last known ${list}: ${errorText(err)}`);
    }
  }

  private setList(list: keyof ServerLists, items: never[]): void {
    if (JSON.stringify(items) !== JSON.stringify(this.lists[list])) this.pendingChanges.add(list);
    this.lists = { ...this.lists, [list]: items };
  }

  // ---------------------------------------------------------------- health

  private scheduleHealth(conn: Connection): void {
    this.stopHealth();
    if (this.options.healthIntervalMs <= 0) return;
    const delay = applyJitter(this.options.healthIntervalMs, this.options.healthJitter, this.random);
    this.healthTimer = setTimeout(() => void this.probe(conn), delay);
    // Health checks alone must not keep a process alive.
    this.healthTimer.unref?.();
  }

  private stopHealth(): void {
    if (this.healthTimer) clearTimeout(this.healthTimer);
    this.healthTimer = undefined;
  }

  /** One health probe; only warns (degraded/restored), never reconnects. */
  private async probe(conn: Connection): Promise<void> {
    if (conn !== this.conn || this._status !== 'connected') return;
    const opts = { timeout: this.options.healthTimeoutMs };
    try {
      if (!this.pingUnsupported) {
        try {
          await conn.client.ping(opts);
        } catch (err) {
          if (!isMethodNotFound(err)) throw err;
          this.pingUnsupported = true;
          this.log('info', `[${this.name}] ping unsupported, health checks use tools/list`);
          await conn.client.listTools(undefined, opts);
        }
      } else {
        await conn.client.listTools(undefined, opts);
      }
      if (conn !== this.conn) return;
      this.lastHealthCheckAt = Date.now();
      this.consecutiveHealthFailures = 0;
      if (this._health === 'degraded') {
        this._health = 'healthy';
        this.log('info', `[${this.name}] health restored`);
        this.emit('server_health_restored', { server: this.name });
      }
    } catch (err) {
      if (conn !== this.conn) return;
      if (isTransportLoss(err) && !isConnectionClosed(err)) {
        // Not a slow or unwell server but a broken link (refused, session unknown): that is a
        // transport loss, and a loss reconnects whoever notices it.
        this.dropConnection(conn, errorText(err), 'loss');
        return;
      }
      this.lastHealthCheckAt = Date.now();
      this.consecutiveHealthFailures += 1;
      this.lastHealthError = errorText(err);
      this.log('warn', `[${this.name}] health check failed (${this.consecutiveHealthFailures}): ${this.lastHealthError}`);
      if (this._health === 'healthy' && this.consecutiveHealthFailures >= this.options.healthFailureThreshold) {
        this._health = 'degraded';
        this.emit('server_health_degraded', { server: this.name, consecutiveFailures: this.consecutiveHealthFailures, lastError: this.lastHealthError });
      }
    } finally {
      if (conn === this.conn && this._status === 'connected') this.scheduleHealth(conn);
    }
  }

  // ---------------------------------------------------------------- status

  private setStatus(status: ServerStatus): void {
    const previous = this._status;
    if (previous === status) return;
    this._status = status;
    this.emit('status', { server: this.name, status, previous });
  }

  summary(): ServerSummary {
    return {
      name: this.name,
      kind: this.kind,
      status: this._status,
      health: this._health,
      attempt: this.attemptNo,
      nextRetryMs: this.nextRetryMs(),
      lastError: this.lastError,
      connectedAt: this.connectedAt === null ? null : new Date(this.connectedAt).toISOString(),
      tools: this.lists.tools.map((t) => t.name),
    };
  }

  detail(): ServerDetail {
    return {
      ...this.summary(),
      nextRetryAt: this.nextRetryAt === null ? null : new Date(this.nextRetryAt).toISOString(),
      pid: this.pid,
      consecutiveHealthFailures: this.consecutiveHealthFailures,
      lastHealthError: this.lastHealthError,
      lastHealthCheckAt: this.lastHealthCheckAt === null ? null : new Date(this.lastHealthCheckAt).toISOString(),
      recentCrashes: this.crashes.count,
      maxRetries: this.options.maxRetries ?? null,
      // The names other MCP gateways use for the same facts, so their clients read ours.
      retryCount: Math.max(0, this.streakFailures - 1),
      lastRetryTime: this.lastAttemptAt === null ? null : new Date(this.lastAttemptAt).toISOString(),
      errorMessage: this.lastError,
      serverInfo: this.serverInfo ? { name: this.serverInfo.name, version: this.serverInfo.version } : null,
      capabilities: this.capabilities,
      resources: this.lists.resources.map((r) => r.uri),
      prompts: this.lists.prompts.map((p) => p.name),
    };
  }
}

/** The HTTP server answered 404 for our session: it did not run the request. */
function isUndelivered(err: unknown): boolean {
  return err instanceof StreamableHTTPError && err.code === 404;
}

/** exec-kind failures that mean the tether link (not the MCP server process) went away. */
function isRemoteLoss(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err.name === 'SessionLostError') return true;
  return isTransportLoss(err) && !isConnectionClosed(err) && !/Not connected/.test(err.message);
}

/** Ends a connection now: a local server's process group is killed, a remote session closed. */
function forceClose(conn: Connection): void {
  const transport = conn.transport as { kill?: () => void; client?: { close?: () => Promise<void> } };
  try {
    transport.kill?.();
  } catch {
    // already gone
  }
  void transport.client?.close?.().catch(() => {});
}

/**
 * Closes a client, waiting at most `timeoutMs`: a remote server whose tether link is down can
 * take its recovery deadline to close, and stop() must not hang on it (the tether server ends
 * the process when the session expires).
 */
async function closeQuietly(client: Client, timeoutMs = 5000): Promise<void> {
  // Already closed or never opened: nothing to release (settleWithin never rejects).
  await settleWithin(client.close(), timeoutMs);
}
