import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type { ClientNotification, ClientRequest, Progress, Prompt, Resource, ResourceTemplate, Result, ServerCapabilities, ServerNotification, ServerRequest, Tool } from '@modelcontextprotocol/sdk/types.js';
import type { BackoffPolicy } from '../util/backoff.js';

export type ServerKind = 'stdio' | 'http' | 'exec';

/**
 * connecting → connected ↔ reconnecting → failed | requires_reauth; disconnected = stopped on
 * purpose; connected ↔ restarting: a tether server said it restarts and keeps the session (the
 * link reconnects at once, no backoff).
 */
export type ServerStatus = 'connecting' | 'connected' | 'reconnecting' | 'restarting' | 'failed' | 'requires_reauth' | 'disconnected';
/** `unknown` until a first check: a connection's initialize and lists, then the periodic probes. */
export type ServerHealth = 'unknown' | 'healthy' | 'degraded';

interface StdioLike {
  command: string;
  args?: string[];
  env?: Record<string, string>;
  cwd?: string;
}

/** A local stdio MCP server (the SDK's StdioClientTransport). */
export interface StdioServerSpec extends StdioLike {
  name: string;
  kind: 'stdio';
}

/** A stdio MCP server run on a tether exec-server (src/mcp's ExecStdioClientTransport). */
export interface ExecServerSpec extends StdioLike {
  name: string;
  kind: 'exec';
  tether: {
    url: string;
    /** Literal token; prefer tokenFile so the token stays out of the config. */
    token?: string;
    /** Read again before every connection attempt, so a rotated token is picked up. */
    tokenFile?: string;
    /** For wss://: a PEM file of the CA certificate(s) to trust, read again before every connection attempt. */
    caFile?: string;
    recoveryDeadlineMs?: number;
    /** An unanswered ping older than this means the link is dead (default 2000 ms). */
    keepaliveTimeoutMs?: number;
  };
}

/** A Streamable HTTP MCP server. */
export interface HttpServerSpec {
  name: string;
  kind: 'http';
  url: string;
  headers?: Record<string, string>;
}

export type ServerSpec = StdioServerSpec | ExecServerSpec | HttpServerSpec;

/** Every interval, threshold and limit of one supervisor. Defaults: DEFAULT_SUPERVISOR_OPTIONS. */
export interface SupervisorOptions {
  backoff: BackoffPolicy;
  /** Reconnect attempts after a loss before `failed`; undefined = unlimited. */
  maxRetries: number | undefined;
  /** stdio/exec: this many unrequested exits within crashWindowMs → `failed`. */
  crashLimit: number;
  crashWindowMs: number;
  /** Health probe (MCP ping, tools/list fallback) period while connected, ± healthJitter. */
  healthIntervalMs: number;
  healthJitter: number;
  healthTimeoutMs: number;
  /** Consecutive failed probes that turn health `degraded`. */
  healthFailureThreshold: number;
  /** Bound on one connection attempt (spawn/connect + initialize). */
  connectTimeoutMs: number;
  /** Bound on a forwarded call and on each discovery request. */
  requestTimeoutMs: number;
}

export const DEFAULT_SUPERVISOR_OPTIONS: SupervisorOptions = {
  backoff: { initialMs: 1000, factor: 2, maxMs: 180_000, jitter: 0.1 },
  maxRetries: undefined,
  crashLimit: 3,
  crashWindowMs: 5 * 60_000,
  healthIntervalMs: 120_000,
  healthJitter: 0.1,
  healthTimeoutMs: 60_000,
  healthFailureThreshold: 3,
  connectTimeoutMs: 30_000,
  requestTimeoutMs: 60_000,
};

/** Options as a user writes them: any subset, backoff fields included. */
export type SupervisorOptionsInput = Partial<Omit<SupervisorOptions, 'backoff'>> & { backoff?: Partial<BackoffPolicy> };

export function resolveSupervisorOptions(...inputs: Array<SupervisorOptionsInput | undefined>): SupervisorOptions {
  let out: SupervisorOptions = { ...DEFAULT_SUPERVISOR_OPTIONS, backoff: { ...DEFAULT_SUPERVISOR_OPTIONS.backoff } };
  for (const input of inputs) {
    if (!input) continue;
    const { backoff, ...rest } = input;
    const defined = Object.fromEntries(Object.entries(rest).filter(([, v]) => v !== undefined));
    out = { ...out, ...defined, backoff: { ...out.backoff, ...stripUndefined(backoff ?? {}) } };
    if ('maxRetries' in rest) out.maxRetries = rest.maxRetries;
  }
  return out;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** What `GET /mcp/servers` reports per server (exact shape). */
export interface ServerSummary {
  name: string;
  kind: ServerKind;
  status: ServerStatus;
  health: ServerHealth;
  attempt: number;
  nextRetryMs: number | null;
  /** What explains the current status; null while connected. */
  lastError: string | null;
  /** Why automatic retries stopped (`failed`, `requires_reauth`: "crashed 3 times within 300 s; last: …"), else null. */
  reason: string | null;
  /**
   * The last failure, kept after the server is back (`recoveredAt`), or null if it never
   * failed: `at` is when it went down, `lastAttemptAt` when the latest retry failed, `error`
   * the latest error.
   */
  lastFailure: { error: string; at: string; lastAttemptAt: string; recoveredAt: string | null } | null;
  /** Times the server was connected again after a failure. */
  restarts: number;
  connectedAt: string | null;
  tools: string[];
}

/** Everything a supervisor knows, for `get_server_status` and `GET /mcp/servers/:name`. */
export interface ServerDetail extends ServerSummary {
  nextRetryAt: string | null;
  /** Local stdio server process id while connected. */
  pid: number | null;
  consecutiveHealthFailures: number;
  lastHealthError: string | null;
  lastHealthCheckAt: string | null;
  recentCrashes: number;
  maxRetries: number | null;
  /** Retries made in the current streak of failures (0 while connected). */
  retryCount: number;
  /** When the last connection attempt started (ISO), or null. */
  lastRetryTime: string | null;
  /** = lastError (the name other gateways use). */
  errorMessage: string | null;
  serverInfo: { name: string; version: string } | null;
  /** The protocol era the server was last connected in (kept and tried first), or null before any. */
  protocolEra: '2025' | '2026-07-28' | null;
  capabilities: ServerCapabilities | null;
  resources: string[];
  prompts: string[];
}

export interface ServerLists {
  tools: Tool[];
  resources: Resource[];
  resourceTemplates: ResourceTemplate[];
  prompts: Prompt[];
}

/** Where a supervised server's own requests and notifications go (the gateway's hosts). */
export interface SupervisorHooks {
  /** sampling/createMessage, elicitation/create, roots/list from the server. */
  onRequest?(server: string, request: ServerRequest, extra: RequestHandlerExtra<ClientRequest, ClientNotification>): Promise<Result>;
  /** notifications/message, notifications/resources/updated from the server. */
  onNotification?(server: string, notification: ServerNotification): void;
}

/** Options of one call through a supervisor (`callTool`, `request`, `subscribe`, …). */
export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
  /** Progress the server reports; each report also restarts the timeout (long tools stay alive). */
  onprogress?: (progress: Progress) => void;
}

/** Events of one supervisor; every payload also carries `server` (the configured name). */
export interface SupervisorEvents {
  server_connected: [{ server: string; capabilities: ServerCapabilities | null }];
  server_disconnected: [{ server: string; wasIntentional: boolean; reason?: string }];
  server_reconnecting: [{ server: string; attempt: number; nextRetryMs: number }];
  server_reconnected: [{ server: string; attemptsTaken: number; capabilities: ServerCapabilities | null }];
  server_health_degraded: [{ server: string; consecutiveFailures: number; lastError: string }];
  server_health_restored: [{ server: string }];
  server_failed: [{ server: string; reason: string; status: 'failed' | 'requires_reauth' }];
  tools_list_changed: [{ server: string; tools: string[] }];
  /** Any of the server's lists changed (internal: the gateway announces list_changed to hosts). */
  list_changed: [{ server: string; list: keyof ServerLists }];
  status: [{ server: string; status: ServerStatus; previous: ServerStatus }];
}

export type SupervisorEventName = Exclude<keyof SupervisorEvents, 'status' | 'list_changed'>;
export const SUPERVISOR_EVENT_NAMES: SupervisorEventName[] = [
  'server_connected',
  'server_disconnected',
  'server_reconnecting',
  'server_reconnected',
  'server_health_degraded',
  'server_health_restored',
  'server_failed',
  'tools_list_changed',
];

export type { Logger } from '../util/logger.js';
