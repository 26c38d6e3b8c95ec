/**
 * Requests between hosts and servers, both ways. A host's request to a server is recorded
 * as in flight while it runs, its progress relayed under the host's token and its
 * cancellation passed on. A server's own requests go back to a host by that record:
 *
 * - sampling/createMessage and elicitation/create go to the host whose calls are in flight
 *   to that server: when every request in flight to it comes from one host, that host
 *   answers (on the stream of the call, when there is exactly one); with none or several
 *   hosts the answer is an error that says so ("ambiguous"), as it is when the host does
 *   not support the capability;
 * - roots/list is answered with the union of the roots the 2025 hosts announce, plus, when
 *   the calls in flight to that server all come from one 2026-07-28 host that declares
 *   `roots`, that host's roots (asked through its call's `input_required`).
 *
 * A 2026-07-28 host has no session to be asked on: its call carries `ask` instead
 * (input-bridge.ts turns the request into that call's `input_required`), and counts as a
 * host of its own.
 */
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import {
  ErrorCode,
  McpError,
  ResultSchema,
  type ClientNotification,
  type ClientRequest,
  type Result,
  type Root,
  type ServerNotification,
  type ServerRequest,
} from '@modelcontextprotocol/sdk/types.js';
import type { CallOptions, ServerSupervisor } from '../supervisor/index.js';
import type { HostSession } from './hosts.js';
import { passOn, rpcError } from './rpc-errors.js';

type HostExtra = RequestHandlerExtra<ServerRequest, ServerNotification>;
type BackendExtra = RequestHandlerExtra<ClientRequest, ClientNotification>;

/** What a forwarded request carries from the host: who asked, the SDK's extra, its progress token. */
export interface HostContext {
  host?: HostSession;
  extra?: HostExtra;
  progressToken?: string | number;
  /** A 2026-07-28 host's call: asks that host (its next round answers). */
  ask?: (request: ServerRequest) => Promise<Result>;
  /** A 2026-07-28 host's call: whether the host declared `roots` in the request's client capabilities. */
  roots?: boolean;
}

type InFlight = { host: HostSession; extra: HostExtra; ask?: undefined } | { host: object; extra?: HostExtra; ask: (request: ServerRequest) => Promise<Result>; roots: boolean };

export interface RelayOptions {
  /** The roots a server's roots/list is answered with. */
  roots(): Root[];
  /** Bound on a sampling or elicitation request forwarded to a host. */
  hostRequestTimeoutMs: number;
}

export class HostRelay {
  /** By server name: the host requests in flight to it. */
  private readonly inflight = new Map<string, Set<InFlight>>();

  constructor(private readonly opts: RelayOptions) {}

  /** Sends a host's request to a server (see the file comment). */
  async send(server: ServerSupervisor, method: string, params: Record<string, unknown>, ctx: HostContext): Promise<Result> {
    const entry: InFlight | undefined = ctx.ask ? { host: ctx.ask, extra: ctx.extra, ask: ctx.ask, roots: ctx.roots === true } : ctx.host && ctx.extra ? { host: ctx.host, extra: ctx.extra } : undefined;
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

  /**
   * roots/list: the union of the 2025 hosts' roots; when the requests in flight to the server
   * all come from one 2026-07-28 host that declared `roots`, that host's own roots (asked with
   * its call's `input_required`) join them. If it does not answer, the 2025 hosts' roots.
   */
  private async rootsFor(entries: InFlight[], hosts: number, request: ServerRequest): Promise<Root[]> {
    const base = this.opts.roots();
    const modern = hosts === 1 ? entries.find((e) => e.ask) : undefined;
    if (!modern?.ask || !modern.roots) return base;
    let answer: Result;
    try {
      answer = await modern.ask(request);
    } catch {
      return base;
    }
    const byUri = new Map(base.map((r) => [r.uri, r]));
    for (const r of ((answer as { roots?: Root[] }).roots ?? [])) if (r && typeof r.uri === 'string' && !byUri.has(r.uri)) byUri.set(r.uri, r);
    return [...byUri.values()];
  }

  /** sampling/createMessage, elicitation/create, roots/list from a server: see the file comment. */
  async fromServer(serverName: string, request: ServerRequest, backendExtra: BackendExtra): Promise<Result> {
    const entries = [...(this.inflight.get(serverName) ?? [])];
    const hosts = new Set(entries.map((e) => e.host));
    if (request.method === 'roots/list') return { roots: await this.rootsFor(entries, hosts.size, request) };
    const what = request.method === 'sampling/createMessage' ? 'sampling' : request.method === 'elicitation/create' ? 'elicitation' : request.method;
    if (hosts.size === 0) {
      throw rpcError(ErrorCode.InvalidRequest, `${what} from '${serverName}' cannot be forwarded: no host has a request in flight to it, so the gateway cannot tell which host should answer`);
    }
    if (hosts.size > 1) {
      throw rpcError(ErrorCode.InvalidRequest, `${what} from '${serverName}' is ambiguous: ${hosts.size} hosts have requests in flight to it; the gateway forwards it only when they all come from one host`);
    }
    const modern = entries.find((e) => e.ask);
    if (modern?.ask) return modern.ask(request);
    const [host] = hosts as Set<HostSession>;
    const caps = host!.server.getClientCapabilities();
    const supported = request.method === 'sampling/createMessage' ? caps?.sampling : request.method === 'elicitation/create' ? caps?.elicitation : undefined;
    if (!supported) throw rpcError(ErrorCode.InvalidRequest, `${what} from '${serverName}': the host does not support ${what}`);
    const options = { signal: backendExtra.signal, timeout: this.opts.hostRequestTimeoutMs };
    try {
      // With exactly one request in flight, on that request's stream (Streamable HTTP hosts
      // then see it beside the call that caused it).
      if (entries.length === 1) return await entries[0]!.extra!.sendRequest(request as never, ResultSchema, options);
      return await host!.server.request(request as never, ResultSchema, options);
    } catch (err) {
      if (err instanceof McpError) throw passOn(err);
      throw err;
    }
  }
}
