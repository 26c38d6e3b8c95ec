/**
 * What a supervisor reports about its server: the summary of `GET /mcp/servers` and the
 * detail of `get_server_status` / `GET /mcp/servers/:name`, built from its parts' facts.
 */
import type { Catalog } from './catalog.js';
import type { FailureRecord } from './failure-record.js';
import type { HealthMonitor } from './health.js';
import type { RetryPolicy } from './policy.js';
import type { ServerDetail, ServerKind, ServerStatus, ServerSummary } from './types.js';

export interface StatusFacts {
  name: string;
  kind: ServerKind;
  status: ServerStatus;
  attempt: number;
  /** Epoch ms, or null. */
  nextRetryAt: number | null;
  failures: FailureRecord;
  connectedAt: number | null;
  lastAttemptAt: number | null;
  pid: number | null;
  maxRetries: number | undefined;
  health: HealthMonitor<unknown>;
  catalog: Catalog;
  policy: RetryPolicy;
  era: 'legacy' | 'modern' | null;
}

/** Milliseconds until the next automatic retry, or null when none is scheduled. */
export function msUntil(at: number | null): number | null {
  return at === null ? null : Math.max(0, at - Date.now());
}

export function summarize(f: StatusFacts): ServerSummary {
  const last = f.failures.lastFailure;
  return {
    name: f.name,
    kind: f.kind,
    status: f.status,
    // Health is what the probes of a live connection found: a server that is not connected
    // is not `healthy`, whatever its last connection's probes said.
    health: f.status === 'connected' ? f.health.health : 'unknown',
    attempt: f.attempt,
    nextRetryMs: msUntil(f.nextRetryAt),
    lastError: f.failures.lastError,
    reason: f.failures.reason,
    lastFailure: last ? { error: last.error, at: new Date(last.at).toISOString(), lastAttemptAt: new Date(last.lastAttemptAt).toISOString(), recoveredAt: isoOrNull(last.recoveredAt) } : null,
    restarts: f.failures.restarts,
    connectedAt: isoOrNull(f.connectedAt),
    tools: f.catalog.lists.tools.map((t) => t.name),
  };
}

export function detailOf(f: StatusFacts): ServerDetail {
  const { serverInfo, capabilities, lists } = f.catalog;
  return {
    ...summarize(f),
    nextRetryAt: isoOrNull(f.nextRetryAt),
    pid: f.pid,
    consecutiveHealthFailures: f.health.consecutiveFailures,
    lastHealthError: f.health.lastError,
    lastHealthCheckAt: isoOrNull(f.health.lastCheckAt),
    recentCrashes: f.policy.recentCrashes,
    maxRetries: f.maxRetries ?? null,
    // The names other MCP gateways use for the same facts, so their clients read ours.
    retryCount: f.policy.retryCount,
    lastRetryTime: isoOrNull(f.lastAttemptAt),
    errorMessage: f.failures.lastError,
    serverInfo: serverInfo ? { name: serverInfo.name, version: serverInfo.version } : null,
    protocolEra: f.era === null ? null : f.era === 'modern' ? '2026-07-28' : '2025',
    capabilities,
    resources: lists.resources.map((r) => r.uri),
    prompts: lists.prompts.map((p) => p.name),
  };
}

function isoOrNull(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}
