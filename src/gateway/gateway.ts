import { EventEmitter } from 'node:events';
import { McpError, ErrorCode, type CallToolResult, type Tool } from '@modelcontextprotocol/sdk/types.js';
import {
  ServerSupervisor,
  ServerUnavailableError,
  SUPERVISOR_EVENT_NAMES,
  errorText,
  isRequestTimeout,
  type Logger,
  type ServerDetail,
  type ServerSummary,
  type SupervisorEventName,
  type SupervisorEvents,
  type TransportFactory,
  type CallOptions,
} from '../supervisor/index.js';
import type { GatewayConfig } from './config.js';
import { managementTools } from './management-tools.js';
import { settleWithin } from '../util/timeouts.js';

/** `<server>__<tool>`: the aggregate's name for a server's tool. */
export const TOOL_SEPARATOR = '__';

export function aggregateToolName(server: string, tool: string): string {
  return `${server}${TOOL_SEPARATOR}${tool}`;
}

/** One event as the gateway reports it (SSE, logs): the supervisor event plus its name and time. */
export interface GatewayEvent {
  event: SupervisorEventName;
  data: SupervisorEvents[SupervisorEventName][0] & { time: string };
}

export interface GatewayOptions {
  logger?: Logger;
  transportFactory?: TransportFactory;
  random?: () => number;
  /** How long tools/list waits for the servers' first connection attempts. Default 10000. */
  startupWaitMs?: number;
}

interface GatewayEvents {
  event: [GatewayEvent];
  /** The aggregated tool list changed (debounced). */
  tools_changed: [];
}

/**
 * The servers behind one gateway: a supervisor each, the aggregated tool list, call routing
 * and the management operations. Transport-free: src/gateway/mcp-server.ts and http.ts put
 * it on stdio / HTTP.
 */
export class Gateway extends EventEmitter<GatewayEvents> {
  readonly supervisors = new Map<string, ServerSupervisor>();
  private readonly log: Logger;
  private readonly startupWaitMs: number;
  private ready: Promise<void> = Promise.resolve();
  private toolsChangedTimer: NodeJS.Timeout | undefined;

  constructor(config: GatewayConfig, opts: GatewayOptions = {}) {
    super();
    // One listener per MCP session and per /events subscriber: many is normal, not a leak.
    this.setMaxListeners(0);
    this.log = opts.logger ?? (() => {});
    this.startupWaitMs = opts.startupWaitMs ?? 10_000;
    for (const { spec, supervisor } of config.servers) {
      const s = new ServerSupervisor(spec, { ...supervisor, logger: this.log, transportFactory: opts.transportFactory, random: opts.random });
      for (const name of SUPERVISOR_EVENT_NAMES) {
        s.on(name, (payload: object) => this.forward(name, payload));
      }
      this.supervisors.set(spec.name, s);
    }
  }

  private forward(name: SupervisorEventName, payload: object): void {
    const event = { event: name, data: { ...payload, time: new Date().toISOString() } } as GatewayEvent;
    this.emit('event', event);
    if (name === 'tools_list_changed') this.scheduleToolsChanged();
  }

  /** Several servers connecting at once make one list_changed, not a burst. */
  private scheduleToolsChanged(): void {
    if (this.toolsChangedTimer) return;
    this.toolsChangedTimer = setTimeout(() => {
      this.toolsChangedTimer = undefined;
      this.emit('tools_changed');
    }, 50);
  }

  /** Starts every supervisor; resolves when each first attempt has settled. */
  async start(): Promise<void> {
    const all = Promise.all([...this.supervisors.values()].map((s) => s.start().catch(() => {}))).then(() => {});
    this.ready = all;
    await all;
  }

  /** Resolves when startup settled or after startupWaitMs, whichever first. */
  async whenReady(): Promise<void> {
    await settleWithin(this.ready, this.startupWaitMs);
  }

  async close(): Promise<void> {
    clearTimeout(this.toolsChangedTimer);
    this.toolsChangedTimer = undefined;
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

  /** Management tools first, then every server's last known tools, prefixed. */
  tools(): Tool[] {
    const out: Tool[] = [...managementTools];
    const seen = new Set(out.map((t) => t.name));
    for (const s of this.supervisors.values()) {
      for (const tool of s.tools) {
        const name = aggregateToolName(s.name, tool.name);
        // Two servers can only collide through odd names (a + _x vs a_ + x): first one wins.
        if (seen.has(name)) continue;
        seen.add(name);
        out.push({ ...tool, name });
      }
    }
    return out;
  }

  /**
   * Which server and tool an aggregated name stands for: a listed tool first (names like
   * `a___x` could split two ways), else the longest server-name prefix (a server whose tools
   * are not known yet still gets the call, and with it an immediate connection attempt).
   */
  resolveTool(name: string): { server: ServerSupervisor; tool: string } | undefined {
    for (const s of this.supervisors.values()) {
      const prefix = s.name + TOOL_SEPARATOR;
      if (name.startsWith(prefix) && s.tools.some((t) => t.name === name.slice(prefix.length))) return { server: s, tool: name.slice(prefix.length) };
    }
    const candidates = [...this.supervisors.values()].filter((s) => name.startsWith(s.name + TOOL_SEPARATOR));
    const best = candidates.sort((a, b) => b.name.length - a.name.length)[0];
    return best ? { server: best, tool: name.slice(best.name.length + TOOL_SEPARATOR.length) } : undefined;
  }

  /**
   * Runs a tools/call for a gateway client. Unavailability and timeouts come back as tool
   * errors (isError) so the model reads why; a server's own JSON-RPC error passes through.
   */
  async callTool(name: string, args: Record<string, unknown> | undefined, signal?: AbortSignal, onprogress?: CallOptions['onprogress']): Promise<CallToolResult> {
    const management = await this.callManagementTool(name, args);
    if (management) return management;
    const target = this.resolveTool(name);
    if (!target) throw new McpError(ErrorCode.InvalidParams, `unknown tool '${name}': gateway tools are named <server>${TOOL_SEPARATOR}<tool>; servers: ${[...this.supervisors.keys()].join(', ') || 'none'}`);
    try {
      return await target.server.callTool(target.tool, args, { signal, onprogress });
    } catch (err) {
      if (err instanceof ServerUnavailableError) return toolError(err.message);
      if (isRequestTimeout(err)) return toolError(`MCP server '${target.server.name}': tool '${target.tool}' timed out (${errorText(err)})`);
      if (err instanceof McpError) throw err;
      return toolError(`MCP server '${target.server.name}': ${errorText(err)}`);
    }
  }

  private async callManagementTool(name: string, args: Record<string, unknown> | undefined): Promise<CallToolResult | undefined> {
    const serverArg = () => {
      const server = args?.name;
      if (typeof server !== 'string') throw new McpError(ErrorCode.InvalidParams, `${name}: argument 'name' (the server name) is required`);
      if (!this.supervisors.has(server)) throw new McpError(ErrorCode.InvalidParams, `${name}: no server named '${server}'; servers: ${[...this.supervisors.keys()].join(', ') || 'none'}`);
      return server;
    };
    switch (name) {
      case 'list_servers':
        return jsonResult({ servers: this.summaries() });
      case 'get_server_status':
        return jsonResult(this.detail(serverArg())!);
      case 'reconnect_server':
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
