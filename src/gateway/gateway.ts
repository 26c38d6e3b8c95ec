import { EventEmitter } from 'node:events';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import {
  ErrorCode,
  McpError,
  ResultSchema,
  type CallToolResult,
  type ClientNotification,
  type ClientRequest,
  type LoggingLevel,
  type Prompt,
  type Resource,
  type ResourceTemplate,
  type Result,
  type Root,
  type ServerNotification,
  type ServerRequest,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import {
  ServerSupervisor,
  ServerUnavailableError,
  SUPERVISOR_EVENT_NAMES,
  errorText,
  isMethodNotFound,
  isRequestTimeout,
  type Logger,
  type ServerDetail,
  type ServerLists,
  type ServerSummary,
  type SupervisorEventName,
  type SupervisorEvents,
  type TransportFactory,
  type CallOptions,
} from '../supervisor/index.js';
import type { GatewayConfig, GatewayServerConfig } from './config.js';
import { managementTools } from './management-tools.js';
import { ResourceIndex } from './resources.js';
import { settleWithin } from '../util/timeouts.js';

/** `<server>__<tool>` (and `<server>__<prompt>`): the aggregate's name for a server's tool. */
export const TOOL_SEPARATOR = '__';

export function aggregateToolName(server: string, tool: string): string {
  return `${server}${TOOL_SEPARATOR}${tool}`;
}

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

type HostExtra = RequestHandlerExtra<ServerRequest, ServerNotification>;
type BackendExtra = RequestHandlerExtra<ClientRequest, ClientNotification>;

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

/** What a forwarded request carries from the host: who asked, the SDK's extra, its progress token. */
export interface HostContext {
  host?: HostSession;
  extra?: HostExtra;
  progressToken?: string | number;
}

interface InFlight {
  host: HostSession;
  extra: HostExtra;
}

const LOG_SEVERITY: LoggingLevel[] = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'];

/** A JSON-RPC error whose message is said once (McpError prefixes "MCP error N:" to it, and the host's SDK does again). */
export function rpcError(code: number, message: string, data?: unknown): Error {
  return Object.assign(new Error(message), { code, data });
}

/** A server's own error answer, passed on with its code, its message said once. */
function passOn(err: McpError): Error {
  return rpcError(err.code, err.message.replace(/^(MCP error -?\d+: )+/, ''), err.data);
}

/**
 * The servers behind one gateway: a supervisor each, the aggregated tools, prompts and
 * resources, request routing both ways, and the management operations. Transport-free:
 * src/gateway/mcp-server.ts and http.ts put it on stdio / HTTP.
 *
 * Server-to-client requests (sampling, elicitation) go to the host whose calls are in flight
 * to that server: when every request in flight to it comes from one host, that host answers
 * (on the stream of the call, when there is exactly one); with none or several hosts the
 * answer is an error that says so ("ambiguous"). roots/list is answered with the union of
 * the roots the hosts announce, and the log level asked of the servers is the most verbose
 * one any host set.
 */
export class Gateway extends EventEmitter<GatewayEvents> {
  readonly supervisors = new Map<string, ServerSupervisor>();
  private readonly configs = new Map<string, string>();
  private readonly log: Logger;
  private readonly startupWaitMs: number;
  private readonly hostRequestTimeoutMs: number;
  private readonly opts: GatewayOptions;
  private ready: Promise<void> = Promise.resolve();
  private started = false;
  private listsChangedTimer: NodeJS.Timeout | undefined;
  private readonly pendingLists = new Set<HostList>();
  private readonly hosts = new Set<HostSession>();
  private hostSeq = 0;
  private readonly inflight = new Map<string, Set<InFlight>>();
  private rootsKey = '[]';

  constructor(config: GatewayConfig, opts: GatewayOptions = {}) {
    super();
    // One listener per MCP session and per /events subscriber: many is normal, not a leak.
    this.setMaxListeners(0);
    this.opts = opts;
    this.log = opts.logger ?? (() => {});
    this.startupWaitMs = opts.startupWaitMs ?? 10_000;
    this.hostRequestTimeoutMs = opts.hostRequestTimeoutMs ?? 600_000;
    for (const server of config.servers) this.addServer(server);
  }

  private addServer({ spec, supervisor }: GatewayServerConfig): ServerSupervisor {
    const s = new ServerSupervisor(spec, {
      ...supervisor,
      logger: this.log,
      transportFactory: this.opts.transportFactory,
      random: this.opts.random,
      hooks: {
        onRequest: (server, request, extra) => this.fromServer(server, request, extra),
        onNotification: (server, notification) => this.notificationFromServer(server, notification),
      },
    });
    for (const name of SUPERVISOR_EVENT_NAMES) {
      s.on(name, (payload: object) => {
        this.forward(name, payload);
        // The summary (attempt, next retry, last error, health, tools) changes with each.
        this.emit('status', s.summary());
      });
    }
    s.on('list_changed', ({ list }) => this.listChanged(list));
    s.on('status', () => this.emit('status', s.summary()));
    this.supervisors.set(spec.name, s);
    this.configs.set(spec.name, JSON.stringify({ spec, supervisor }));
    const level = this.effectiveLogLevel();
    if (level) void s.setLogLevel(level);
    return s;
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
    const next = new Map(config.servers.map((s) => [s.spec.name, s]));
    const added: string[] = [];
    const removed: string[] = [];
    const changed: string[] = [];
    for (const name of [...this.supervisors.keys()]) {
      const entry = next.get(name);
      if (!entry) removed.push(name);
      else if (JSON.stringify({ spec: entry.spec, supervisor: entry.supervisor }) !== this.configs.get(name)) changed.push(name);
    }
    for (const name of next.keys()) if (!this.supervisors.has(name)) added.push(name);
    await Promise.all(
      [...removed, ...changed].map(async (name) => {
        const s = this.supervisors.get(name)!;
        this.supervisors.delete(name);
        this.configs.delete(name);
        s.removeAllListeners();
        await s.stop();
      }),
    );
    // Keep the config's order (it decides which server keeps a shared resource URI).
    const old = new Map(this.supervisors);
    const oldConfigs = new Map(this.configs);
    this.supervisors.clear();
    this.configs.clear();
    const fresh: ServerSupervisor[] = [];
    for (const [name, entry] of next) {
      const kept = old.get(name);
      if (kept) {
        this.supervisors.set(name, kept);
        this.configs.set(name, oldConfigs.get(name)!);
      } else {
        fresh.push(this.addServer(entry));
      }
    }
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
    const host: HostSession = { id: ++this.hostSeq, server, logLevel: null, roots: [], subscriptions: new Set() };
    this.hosts.add(host);
    return host;
  }

  /** The host went away: its log level, roots and subscriptions no longer count. */
  detachHost(host: HostSession): void {
    if (!this.hosts.delete(host)) return;
    for (const uri of host.subscriptions) void this.unsubscribe(host, uri).catch(() => {});
    this.applyLogLevel();
    this.rootsChanged();
  }

  /** logging/setLevel from a host. */
  setLogLevel(host: HostSession, level: LoggingLevel): void {
    host.logLevel = level;
    this.applyLogLevel();
  }

  /** The most verbose level any host asked for, or null when none asked. */
  private effectiveLogLevel(): LoggingLevel | null {
    let best: number | null = null;
    for (const h of this.hosts) if (h.logLevel) best = Math.min(best ?? Infinity, LOG_SEVERITY.indexOf(h.logLevel));
    return best === null ? null : LOG_SEVERITY[best]!;
  }

  private applyLogLevel(): void {
    const level = this.effectiveLogLevel();
    for (const s of this.supervisors.values()) void s.setLogLevel(level);
  }

  /** A host announced (new) roots. */
  setRoots(host: HostSession, roots: Root[]): void {
    host.roots = roots;
    this.rootsChanged();
  }

  /** The union of the hosts' roots, by URI. */
  roots(): Root[] {
    const byUri = new Map<string, Root>();
    for (const h of this.hosts) for (const r of h.roots) if (!byUri.has(r.uri)) byUri.set(r.uri, r);
    return [...byUri.values()];
  }

  private rootsChanged(): void {
    const key = JSON.stringify(this.roots());
    if (key === this.rootsKey) return;
    this.rootsKey = key;
    for (const s of this.supervisors.values()) s.notifyRootsChanged();
  }

  // ---------------------------------------------------------------- lists

  /** Management tools first, then every server's last known tools, prefixed. */
  tools(): Tool[] {
    return [...managementTools, ...this.prefixed((s) => s.tools)];
  }

  /** Every server's last known prompts, named `<server>__<prompt>`. */
  prompts(): Prompt[] {
    return this.prefixed((s) => s.prompts);
  }

  private prefixed<T extends { name: string }>(items: (s: ServerSupervisor) => T[]): T[] {
    const out: T[] = [];
    const seen = new Set(managementTools.map((t) => t.name));
    for (const s of this.supervisors.values()) {
      for (const item of items(s)) {
        const name = aggregateToolName(s.name, item.name);
        // Two servers can only collide through odd names (a + _x vs a_ + x): first one wins.
        if (seen.has(name)) continue;
        seen.add(name);
        out.push({ ...item, name });
      }
    }
    return out;
  }

  private resourceIndex(): ResourceIndex {
    return new ResourceIndex(
      [...this.supervisors.values()].map((s) => ({
        name: s.name,
        resources: s.resources,
        resourceTemplates: s.resourceTemplates,
        offersResources: s.serverCapabilities ? Boolean(s.serverCapabilities.resources) : true,
      })),
    );
  }

  resources(): Resource[] {
    return this.resourceIndex().resources;
  }

  resourceTemplates(): ResourceTemplate[] {
    return this.resourceIndex().templates;
  }

  /**
   * Which server and name an aggregated name stands for: a listed item first (names like
   * `a___x` could split two ways), else the longest server-name prefix (a server whose list
   * is not known yet still gets the request, and with it an immediate connection attempt).
   */
  resolveTool(name: string): { server: ServerSupervisor; tool: string } | undefined {
    const r = this.resolveName(name, (s) => s.tools);
    return r && { server: r.server, tool: r.name };
  }

  private resolveName(name: string, items: (s: ServerSupervisor) => { name: string }[]): { server: ServerSupervisor; name: string } | undefined {
    for (const s of this.supervisors.values()) {
      const prefix = s.name + TOOL_SEPARATOR;
      if (name.startsWith(prefix) && items(s).some((t) => t.name === name.slice(prefix.length))) return { server: s, name: name.slice(prefix.length) };
    }
    const candidates = [...this.supervisors.values()].filter((s) => name.startsWith(s.name + TOOL_SEPARATOR));
    const best = candidates.sort((a, b) => b.name.length - a.name.length)[0];
    return best ? { server: best, name: name.slice(best.name.length + TOOL_SEPARATOR.length) } : undefined;
  }

  private resolveResource(uri: string): { server: ServerSupervisor; uri: string } {
    const r = this.resourceIndex().resolve(uri, (name) => this.supervisors.has(name));
    if (!r) throw rpcError(ErrorCode.InvalidParams, `unknown resource '${uri}': no server behind this gateway lists it or a template that matches it`);
    return { server: this.supervisors.get(r.server)!, uri: r.uri };
  }

  // ---------------------------------------------------------------- requests from hosts

  /**
   * Runs a tools/call for a host. Unavailability and timeouts come back as tool errors
   * (isError) so the model reads why; a server's own JSON-RPC error passes through.
   */
  async callTool(name: string, args: Record<string, unknown> | undefined, ctx: HostContext = {}): Promise<CallToolResult> {
    const management = await this.callManagementTool(name, args);
    if (management) return management;
    const target = this.resolveTool(name);
    if (!target) throw rpcError(ErrorCode.InvalidParams, `unknown tool '${name}': gateway tools are named <server>${TOOL_SEPARATOR}<tool>; servers: ${[...this.supervisors.keys()].join(', ') || 'none'}`);
    try {
      return (await this.relay(target.server, 'tools/call', { name: target.tool, arguments: args ?? {} }, ctx)) as CallToolResult;
    } catch (err) {
      if (err instanceof ServerUnavailableError) return toolError(err.message);
      if (isRequestTimeout(err)) return toolError(`MCP server '${target.server.name}': tool '${target.tool}' timed out (${errorText(err)})`);
      if (err instanceof McpError) throw passOn(err);
      return toolError(`MCP server '${target.server.name}': ${errorText(err)}`);
    }
  }

  async getPrompt(name: string, args: Record<string, string> | undefined, ctx: HostContext = {}): Promise<Result> {
    const target = this.resolveName(name, (s) => s.prompts);
    if (!target) throw rpcError(ErrorCode.InvalidParams, `unknown prompt '${name}': gateway prompts are named <server>${TOOL_SEPARATOR}<prompt>; servers: ${[...this.supervisors.keys()].join(', ') || 'none'}`);
    return this.request(target.server, 'prompts/get', { name: target.name, ...(args ? { arguments: args } : {}) }, ctx);
  }

  async readResource(uri: string, ctx: HostContext = {}): Promise<Result> {
    const target = this.resolveResource(uri);
    const result = await this.request(target.server, 'resources/read', { uri: target.uri }, ctx);
    // The contents name the URI the host asked for.
    const contents = (result as { contents?: { uri?: string }[] }).contents;
    if (Array.isArray(contents) && uri !== target.uri) {
      return { ...result, contents: contents.map((c) => (c.uri === target.uri ? { ...c, uri } : c)) };
    }
    return result;
  }

  async subscribe(host: HostSession, uri: string): Promise<void> {
    const target = this.resolveResource(uri);
    const already = [...this.hosts].some((h) => h.subscriptions.has(uri));
    if (!already) await this.asRpc(target.server, () => target.server.subscribe(target.uri));
    host.subscriptions.add(uri);
  }

  async unsubscribe(host: HostSession, uri: string): Promise<void> {
    if (!host.subscriptions.delete(uri)) return;
    if ([...this.hosts].some((h) => h.subscriptions.has(uri))) return;
    const target = this.resolveResource(uri);
    await this.asRpc(target.server, () => target.server.unsubscribe(target.uri));
  }

  /** completion/complete: a prompt's (by its aggregated name) or a resource template's arguments. */
  async complete(params: { ref: { type: string; name?: string; uri?: string }; argument: unknown; context?: unknown }, ctx: HostContext = {}): Promise<Result> {
    let server: ServerSupervisor;
    let ref: Record<string, unknown>;
    if (params.ref.type === 'ref/prompt') {
      const target = this.resolveName(params.ref.name ?? '', (s) => s.prompts);
      if (!target) throw rpcError(ErrorCode.InvalidParams, `unknown prompt '${params.ref.name}'`);
      server = target.server;
      ref = { ...params.ref, name: target.name };
    } else {
      const target = this.resolveResource(params.ref.uri ?? '');
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
    return this.asRpc(server, () => this.relay(server, method, params, ctx));
  }

  private async asRpc<T>(server: ServerSupervisor, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof ServerUnavailableError) throw rpcError(ErrorCode.InternalError, err.message);
      if (err instanceof McpError) {
        if (isMethodNotFound(err)) throw rpcError(err.code, `MCP server '${server.name}': ${passOn(err).message}`);
        throw passOn(err);
      }
      throw rpcError(ErrorCode.InternalError, `MCP server '${server.name}': ${errorText(err)}`);
    }
  }

  /**
   * Sends a host's request to a server: registered as in flight (for the routing of the
   * server's own requests), progress relayed under the host's token, cancellation passed on.
   */
  private async relay(server: ServerSupervisor, method: string, params: Record<string, unknown>, ctx: HostContext): Promise<Result> {
    const entry = ctx.host && ctx.extra ? { host: ctx.host, extra: ctx.extra } : undefined;
    let set = this.inflight.get(server.name);
    if (entry) {
      if (!set) this.inflight.set(server.name, (set = new Set()));
      set.add(entry);
    }
    const { progressToken, extra } = ctx;
    const onprogress: CallOptions['onprogress'] =
      progressToken === undefined || !extra
        ? undefined
        : (p) => void extra.sendNotification({ method: 'notifications/progress', params: { progressToken, ...p } }).catch(() => {});
    try {
      return await server.request(method, params, { signal: extra?.signal, onprogress });
    } finally {
      if (entry) set!.delete(entry);
    }
  }

  // ---------------------------------------------------------------- from servers

  /** sampling/createMessage, elicitation/create, roots/list from a server: see the class comment. */
  private async fromServer(serverName: string, request: ServerRequest, backendExtra: BackendExtra): Promise<Result> {
    if (request.method === 'roots/list') return { roots: this.roots() };
    const entries = [...(this.inflight.get(serverName) ?? [])];
    const hosts = new Set(entries.map((e) => e.host));
    const what = request.method === 'sampling/createMessage' ? 'sampling' : request.method === 'elicitation/create' ? 'elicitation' : request.method;
    if (hosts.size === 0) {
      throw rpcError(ErrorCode.InvalidRequest, `${what} from '${serverName}' cannot be forwarded: no host has a request in flight to it, so the gateway cannot tell which host should answer`);
    }
    if (hosts.size > 1) {
      throw rpcError(ErrorCode.InvalidRequest, `${what} from '${serverName}' is ambiguous: ${hosts.size} hosts have requests in flight to it; the gateway forwards it only when they all come from one host`);
    }
    const [host] = hosts as Set<HostSession>;
    const caps = host!.server.getClientCapabilities();
    const supported = request.method === 'sampling/createMessage' ? caps?.sampling : request.method === 'elicitation/create' ? caps?.elicitation : undefined;
    if (!supported) throw rpcError(ErrorCode.InvalidRequest, `${what} from '${serverName}': the host does not support ${what}`);
    const options = { signal: backendExtra.signal, timeout: this.hostRequestTimeoutMs };
    try {
      // With exactly one request in flight, on that request's stream (Streamable HTTP hosts
      // then see it beside the call that caused it).
      if (entries.length === 1) return await entries[0]!.extra.sendRequest(request as never, ResultSchema, options);
      return await host!.server.request(request as never, ResultSchema, options);
    } catch (err) {
      if (err instanceof McpError) throw passOn(err);
      throw err;
    }
  }

  private notificationFromServer(serverName: string, notification: ServerNotification): void {
    if (notification.method === 'notifications/message') {
      const p = notification.params;
      const severity = LOG_SEVERITY.indexOf(p.level);
      const params = { ...p, logger: p.logger ? `${serverName}/${p.logger}` : serverName };
      for (const h of this.hosts) {
        if (h.logLevel && severity < LOG_SEVERITY.indexOf(h.logLevel)) continue;
        if (h.server.transport && h.server.getClientCapabilities()) void h.server.notification({ method: 'notifications/message', params }).catch(() => {});
      }
    } else if (notification.method === 'notifications/resources/updated') {
      const uri = this.resourceIndex().exposed(serverName, notification.params.uri);
      for (const h of this.hosts) {
        if (h.subscriptions.has(uri)) void h.server.sendResourceUpdated({ ...notification.params, uri }).catch(() => {});
      }
    }
  }

  // ---------------------------------------------------------------- management tools

  private async callManagementTool(name: string, args: Record<string, unknown> | undefined): Promise<CallToolResult | undefined> {
    const serverArg = () => {
      const server = args?.name;
      if (typeof server !== 'string') throw rpcError(ErrorCode.InvalidParams, `${name}: argument 'name' (the server name) is required`);
      if (!this.supervisors.has(server)) throw rpcError(ErrorCode.InvalidParams, `${name}: no server named '${server}'; servers: ${[...this.supervisors.keys()].join(', ') || 'none'}`);
      return server;
    };
    switch (name) {
      case 'list_servers':
        return jsonResult({ servers: this.summaries() });
      case 'get_server_status':
        return jsonResult(this.detail(serverArg())!);
      case 'reconnect_server':
      case 'retry_server':
        return jsonResult((await this.retry(serverArg()))!);
      case 'retry_all_servers':
        return jsonResult({ servers: await this.retryAll() });
      default:
        return undefined;
    }
  }
}

function toolError(text: string): CallToolResult {
  return { isError: true, content: [{ type: 'text', text }] };
}

function jsonResult(value: object): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(value, null, 2) }], structuredContent: value as Record<string, unknown> };
}
