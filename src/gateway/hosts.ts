/**
 * The gateway's hosts (the stdio host, each Streamable HTTP session) and what they ask of
 * it as a whole: the log level the servers are asked for is the most verbose one any host
 * set, roots/list is the union of the roots the hosts announce, and a resource is
 * subscribed while any host subscribes to it. Server log messages and resource updates are
 * delivered here, each host getting what it asked for.
 */
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { LoggingLevel, LoggingMessageNotification, ResourceUpdatedNotification, Root } from '@modelcontextprotocol/sdk/types.js';

/** One MCP client of the gateway (the stdio host, or one Streamable HTTP session). */
export interface HostSession {
  readonly id: number;
  readonly server: Server;
  /** What logging/setLevel asked for, or null (no filtering). */
  logLevel: LoggingLevel | null;
  /** The roots it announced (if it supports roots). */
  roots: Root[];
  /** Exposed resource URIs it subscribed to. */
  readonly subscriptions: Set<string>;
}

const LOG_SEVERITY: LoggingLevel[] = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'];

export class HostSessions {
  private readonly hosts = new Set<HostSession>();
  private seq = 0;
  private rootsKey = '[]';

  attach(server: Server): HostSession {
    const host: HostSession = { id: ++this.seq, server, logLevel: null, roots: [], subscriptions: new Set() };
    this.hosts.add(host);
    return host;
  }

  /** False when the host was not attached (already detached). */
  detach(host: HostSession): boolean {
    return this.hosts.delete(host);
  }

  /** The most verbose level any host asked for, or null when none asked. */
  effectiveLogLevel(): LoggingLevel | null {
    let best: number | null = null;
    for (const h of this.hosts) if (h.logLevel) best = Math.min(best ?? Infinity, LOG_SEVERITY.indexOf(h.logLevel));
    return best === null ? null : LOG_SEVERITY[best]!;
  }

  /** The union of the hosts' roots, by URI. */
  roots(): Root[] {
    const byUri = new Map<string, Root>();
    for (const h of this.hosts) for (const r of h.roots) if (!byUri.has(r.uri)) byUri.set(r.uri, r);
    return [...byUri.values()];
  }

  /** Whether the union of roots differs from the last time this was asked (the servers are then told). */
  rootsChanged(): boolean {
    const key = JSON.stringify(this.roots());
    if (key === this.rootsKey) return false;
    this.rootsKey = key;
    return true;
  }

  /** Whether any host subscribes to this exposed URI. */
  subscribed(uri: string): boolean {
    return [...this.hosts].some((h) => h.subscriptions.has(uri));
  }

  /** A server's log message, to each host whose level lets it through, the logger named after the server. */
  deliverLog(serverName: string, p: LoggingMessageNotification['params']): void {
    const severity = LOG_SEVERITY.indexOf(p.level);
    const params = { ...p, logger: p.logger ? `${serverName}/${p.logger}` : serverName };
    for (const h of this.hosts) {
      if (h.logLevel && severity < LOG_SEVERITY.indexOf(h.logLevel)) continue;
      if (h.server.transport && h.server.getClientCapabilities()) void h.server.notification({ method: 'notifications/message', params }).catch(() => {});
    }
  }

  /** notifications/resources/updated, under the exposed URI, to the hosts subscribed to it. */
  deliverResourceUpdated(uri: string, params: ResourceUpdatedNotification['params']): void {
    for (const h of this.hosts) {
      if (h.subscriptions.has(uri)) void h.server.sendResourceUpdated({ ...params, uri }).catch(() => {});
    }
  }
}
