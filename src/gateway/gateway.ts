import { EventEmitter } from 'node:events';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  ErrorCode,
  McpError,
  type CallToolResult,
  type LoggingLevel,
  type Prompt,
  type Resource,
  type ResourceTemplate,
  type Result,
  type Root,
  type ServerNotification,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import {
  SUPERVISOR_EVENT_NAMES,
  ServerUnavailableError,
  errorText,
  isRequestTimeout,
  type Logger,
  type ServerDetail,
  type ServerLists,
  type ServerSummary,
  type ServerSupervisor,
  type SupervisorEventName,
  type SupervisorEvents,
  type TransportFactory,
} from '../supervisor/index.js';
import type { GatewayConfig } from './config.js';
import { HostSessions, type HostSession } from './hosts.js';
import { callManagementTool } from './management-tools.js';
import { ServerRegistry } from './registry.js';
import { HostRelay, type HostContext } from './relay.js';
import { Router, TOOL_SEPARATOR } from './routing.js';
import { asRpc, passOn, rpcError, toolError } from './rpc-errors.js';
import { settleWithin } from '../util/timeouts.js';

export { TOOL_SEPARATOR, aggregateToolName } from './routing.js';
export { rpcError } from './rpc-errors.js';
export type { HostSession } from './hosts.js';
export type { HostContext } from './relay.js';

/** One event as the gateway reports it (SSE, logs): the supervisor event plus its name and time. */
export interface GatewayEvent {
  event: SupervisorEventName | 'servers_changed';
  data: (SupervisorEvents[SupervisorEventName][0] | { servers: string[] }) & { time: string };
}

export interface GatewayOptions {
  logger?: Logger;
  transportFactory?: TransportFactory;
  random?: () => number;
  /** How long the list requests wait for the servers' first connection attempts. Default 10000. */
  startupWaitMs?: number;
  /** Bound on a sampling or elicitation request forwarded to a host (a human may answer). Default 10 min. */
  hostRequestTimeoutMs?: number;
}

/** The lists hosts are told about with notifications/…/list_changed. */
export type HostList = 'tools' | 'resources' | 'prompts';

interface GatewayEvents {
  event: [GatewayEvent];
  /** Aggregated lists changed (debounced). */
  lists_changed: [HostList[]];
  /** A server's status changed (the status page follows it). */
  status: [ServerSummary];
}

/**
 * The servers behind one gateway: a supervisor each, the aggregated tools, prompts and
 * resources, request routing both ways, and the management operations. Transport-free:
 * src/gateway/mcp-server.ts and http.ts put it on stdio / HTTP.
 *
 * A coordinator: registry.ts holds the supervisors and reloads the config, routing.ts maps
 * aggregated names and URIs to servers, relay.ts carries requests between hosts and servers
 * (sampling and elicitation go to the one host with calls in flight, roots/list is the
 * hosts' union), hosts.ts keeps the hosts and what they asked for (log level, roots,
 * subscriptions), management-tools.ts runs the gateway's own tools. This class starts and
 * stops the servers, turns their events into the gateway's, and answers the hosts.
 */
export class Gateway extends EventEmitter<GatewayEvents> {
  readonly supervisors: Map<string, ServerSupervisor>;
  private readonly registry: ServerRegistry;
  private readonly router: Router;
  private readonly hosts: HostSessions;
  private readonly relay: HostRelay;
  private readonly log: Logger;
  private readonly startupWaitMs: number;
  private ready: Promise<void> = Promise.resolve();
  private started = false;
  private listsChangedTimer: NodeJS.Timeout | undefined;
  private readonly pendingLists = new Set<HostList>();

  constructor(config: GatewayConfig, opts: GatewayOptions = {}) {
    super();
    // One listener per MCP session and per /events subscriber: many is normal, not a leak.
    this.setMaxListeners(0);
    this.log = opts.logger ?? (() => {});
    this.startupWaitMs = opts.startupWaitMs ?? 10_000;
    this.hosts = new HostSessions();
    this.relay = new HostRelay({ roots: () => this.hosts.roots(), hostRequestTimeoutMs: opts.hostRequestTimeoutMs ?? 600_000 });
    this.registry = new ServerRegistry({
      logger: this.log,
      transportFactory: opts.transportFactory,
      random: opts.random,
      hooks: {
        onRequest: (server, request, extra) => this.relay.fromServer(server, request, extra),
        onNotification: (server, notification) => this.notificationFromServer(server, notification),
      },
      onAdded: (s) => this.wire(s),
    });
    this.supervisors = this.registry.supervisors;
    this.router = new Router(this.supervisors);
    for (const server of config.servers) this.registry.add(server);
  }

  /** A new supervisor's events become the gateway's; it gets the hosts' log level. */
  private wire(s: ServerSupervisor): void {
    for (const name of SUPERVISOR_EVENT_NAMES) {
      s.on(name, (payload: object) => {
        this.forward(name, payload);
        // The summary (attempt, next retry, last error, health, tools) changes with each.
        this.emit('status', s.summary());
      });
    }
    s.on('list_changed', ({ list }) => this.listChanged(list));
    s.on('status', () => this.emit('status', s.summary()));
    const level = this.hosts.effectiveLogLevel();
    if (level) void s.setLogLevel(level);
  }

  private forward(name: SupervisorEventName | 'servers_changed', payload: object): void {
    const event = { event: name, data: { ...payload, time: new Date().toISOString() } } as GatewayEvent;
    this.emit('event', event);
  }

  private listChanged(list: keyof ServerLists | HostList): void {
    this.pendingLists.add(list === 'resourceTemplates' ? 'resources' : list);
    // Several servers connecting at once make one list_changed each, not a burst.
    this.listsChangedTimer ??= setTimeout(() => {
      this.listsChangedTimer = undefined;
      const lists = [...this.pendingLists];
      this.pendingLists.clear();
      this.emit('lists_changed', lists);
    }, 50);
  }

  /**
   * Applies a new config (SIGHUP, a changed file): servers added are started, servers removed
   * are stopped, servers whose entry changed are restarted; the others are not touched.
   */
  async reconfigure(config: GatewayConfig): Promise<{ added: string[]; removed: string[]; changed: string[] }> {
    const { added, removed, changed, fresh } = await this.registry.reload(config);
    if (added.length || removed.length || changed.length) {
      this.log('info', `config reloaded: added ${added.join(', ') || 'none'}; removed ${removed.join(', ') || 'none'}; changed ${changed.join(', ') || 'none'}`);
      this.forward('servers_changed', { servers: [...this.supervisors.keys()] });
      for (const list of ['tools', 'resources', 'prompts'] as const) this.listChanged(list);
      if (this.started) await Promise.all(fresh.map((s) => s.start().catch(() => {})));
    }
    return { added, removed, changed };
  }

  /** Starts every supervisor; resolves when each first attempt has settled. */
  async start(): Promise<void> {
    this.started = true;
    const all = Promise.all([...this.supervisors.values()].map((s) => s.start().catch(() => {}))).then(() => {});
    this.ready = all;
    await all;
  }

  /** Resolves when startup settled or after startupWaitMs, whichever first. */
  async whenReady(): Promise<void> {
    await settleWithin(this.ready, this.startupWaitMs);
  }

  /** Stops every server: bounded (each supervisor kills what does not stop within 4 s). */
  async close(): Promise<void> {
    clearTimeout(this.listsChangedTimer);
    this.listsChangedTimer = undefined;
    await Promise.all([...this.supervisors.values()].map((s) => s.stop()));
  }

  get(name: string): ServerSupervisor | undefined {
    return this.supervisors.get(name);
  }

  summaries(): ServerSummary[] {
    return [...this.supervisors.values()].map((s) => s.summary());
  }

  detail(name: string): ServerDetail | undefined {
    return this.supervisors.get(name)?.detail();
  }

  async retry(name: string): Promise<ServerDetail | undefined> {
    return this.supervisors.get(name)?.retry();
  }

  /** Retries every server that is not connected (connected ones are left alone). */
  async retryAll(): Promise<ServerSummary[]> {
    const targets = [...this.supervisors.values()].filter((s) => s.status !== 'connected');
    await Promise.all(targets.map((s) => s.retry().catch(() => {})));
    return this.summaries();
  }

  /** Ready: every server has had its first attempt, and none is still `connecting`. */
  readiness(): { ready: boolean; servers: Record<string, string> } {
    const servers = Object.fromEntries([...this.supervisors.values()].map((s) => [s.name, s.status]));
    return { ready: this.started && Object.values(servers).every((st) => st !== 'connecting'), servers };
  }

  // ---------------------------------------------------------------- hosts

  /** A host connected (createGatewayServer calls this); the returned session is its handle. */
  attachHost(server: Server): HostSession {
    return this.hosts.attach(server);
  }

  /** The host went away: its log level, roots and subscriptions no longer count. */
  detachHost(host: HostSession): void {
    if (!this.hosts.detach(host)) return;
    for (const uri of host.subscriptions) void this.unsubscribe(host, uri).catch(() => {});
    this.applyLogLevel();
    this.rootsChanged();
  }

  /** logging/setLevel from a host. */
  setLogLevel(host: HostSession, level: LoggingLevel): void {
    host.logLevel = level;
    this.applyLogLevel();
  }

  private applyLogLevel(): void {
    const level = this.hosts.effectiveLogLevel();
    for (const s of this.supervisors.values()) void s.setLogLevel(level);
  }

  /** A host announced (new) roots. */
  setRoots(host: HostSession, roots: Root[]): void {
    host.roots = roots;
    this.rootsChanged();
  }

  /** The union of the hosts' roots, by URI. */
  roots(): Root[] {
    return this.hosts.roots();
  }

  private rootsChanged(): void {
    if (this.hosts.rootsChanged()) for (const s of this.supervisors.values()) s.notifyRootsChanged();
  }

  // ---------------------------------------------------------------- lists

  /** Management tools first, then every server's last known tools, prefixed. */
  tools(): Tool[] {
    return this.router.tools();
  }

  /** Every server's last known prompts, named `<server>__<prompt>`. */
  prompts(): Prompt[] {
    return this.router.prompts();
  }

  resources(): Resource[] {
    return this.router.resources();
  }

  resourceTemplates(): ResourceTemplate[] {
    return this.router.resourceTemplates();
  }

  /** Which server and tool an aggregated name stands for (routing.ts). */
  resolveTool(name: string): { server: ServerSupervisor; tool: string } | undefined {
    return this.router.resolveTool(name);
  }

  // ---------------------------------------------------------------- requests from hosts

  /**
   * Runs a tools/call for a host. Unavailability and timeouts come back as tool errors
   * (isError) so the model reads why; a server's own JSON-RPC error passes through.
   */
  async callTool(name: string, args: Record<string, unknown> | undefined, ctx: HostContext = {}): Promise<CallToolResult> {
    const management = await callManagementTool(this, name, args);
    if (management) return management;
    const target = this.router.resolveTool(name);
    if (!target) throw rpcError(ErrorCode.InvalidParams, `unknown tool '${name}': gateway tools are named <server>${TOOL_SEPARATOR}<tool>; servers: ${this.router.serverList()}`);
    try {
      return (await this.relay.send(target.server, 'tools/call', { name: target.tool, arguments: args ?? {} }, ctx)) as CallToolResult;
    } catch (err) {
      if (err instanceof ServerUnavailableError) return toolError(err.message);
      if (isRequestTimeout(err)) return toolError(`MCP server '${target.server.name}': tool '${target.tool}' timed out (${errorText(err)})`);
      if (err instanceof McpError) throw passOn(err);
      return toolError(`MCP server '${target.server.name}': ${errorText(err)}`);
    }
  }

  async getPrompt(name: string, args: Record<string, string> | undefined, ctx: HostContext = {}): Promise<Result> {
    const target = this.router.resolvePrompt(name);
    if (!target) throw rpcError(ErrorCode.InvalidParams, `unknown prompt '${name}': gateway prompts are named <server>${TOOL_SEPARATOR}<prompt>; servers: ${this.router.serverList()}`);
    return this.request(target.server, 'prompts/get', { name: target.name, ...(args ? { arguments: args } : {}) }, ctx);
  }

  async readResource(uri: string, ctx: HostContext = {}): Promise<Result> {
    const target = this.router.resolveResource(uri);
    const result = await this.request(target.server, 'resources/read', { uri: target.uri }, ctx);
    // The contents name the URI the host asked for.
    const contents = (result as { contents?: { uri?: string }[] }).contents;
    if (Array.isArray(contents) && uri !== target.uri) {
      return { ...result, contents: contents.map((c) => (c.uri === target.uri ? { ...c, uri } : c)) };
    }
    return result;
  }

  async subscribe(host: HostSession, uri: string): Promise<void> {
    const target = this.router.resolveResource(uri);
    if (!this.hosts.subscribed(uri)) await asRpc(target.server, () => target.server.subscribe(target.uri));
    host.subscriptions.add(uri);
  }

  async unsubscribe(host: HostSession, uri: string): Promise<void> {
    if (!host.subscriptions.delete(uri)) return;
    if (this.hosts.subscribed(uri)) return;
    const target = this.router.resolveResource(uri);
    await asRpc(target.server, () => target.server.unsubscribe(target.uri));
  }

  /** completion/complete: a prompt's (by its aggregated name) or a resource template's arguments. */
  async complete(params: { ref: { type: string; name?: string; uri?: string }; argument: unknown; context?: unknown }, ctx: HostContext = {}): Promise<Result> {
    let server: ServerSupervisor;
    let ref: Record<string, unknown>;
    if (params.ref.type === 'ref/prompt') {
      const target = this.router.resolvePrompt(params.ref.name ?? '');
      if (!target) throw rpcError(ErrorCode.InvalidParams, `unknown prompt '${params.ref.name}'`);
      server = target.server;
      ref = { ...params.ref, name: target.name };
    } else {
      const target = this.router.resolveResource(params.ref.uri ?? '');
      server = target.server;
      ref = { ...params.ref, uri: target.uri };
    }
    try {
      return await this.request(server, 'completion/complete', { ...params, ref }, ctx);
    } catch (err) {
      // A server without completions simply has none to offer.
      if ((err as { code?: unknown }).code === ErrorCode.MethodNotFound) return { completion: { values: [], hasMore: false } };
      throw err;
    }
  }

  /** A request to one server for a host, its errors turned into JSON-RPC errors said once. */
  private async request(server: ServerSupervisor, method: string, params: Record<string, unknown>, ctx: HostContext): Promise<Result> {
    return asRpc(server, () => this.relay.send(server, method, params, ctx));
  }

  // ---------------------------------------------------------------- from servers

  private notificationFromServer(serverName: string, notification: ServerNotification): void {
    if (notification.method === 'notifications/message') {
      this.hosts.deliverLog(serverName, notification.params);
    } else if (notification.method === 'notifications/resources/updated') {
      this.hosts.deliverResourceUpdated(this.router.exposedUri(serverName, notification.params.uri), notification.params);
    }
  }
}
