import type { IncomingMessage, ServerResponse } from 'node:http';
import { networkOf, RequestLimiter, type Admission } from './request-limits.js';
import { requestWeight } from './request-weight.js';
import { formatBytes } from '../../util/format.js';
import { header, readBody, sendJsonRpcError } from './http-io.js';

/** The bounds of `GatewayHttpOptions` that admission applies (see there), defaults resolved here. */
export interface AdmissionLimits {
  maxBodyBytes?: number;
  maxPendingBodies?: number;
  maxPendingBodiesPerClient?: number;
  maxRequests?: number;
  maxRequestsPerClient?: number;
  maxRequestsPerNetwork?: number;
  maxRequestMemory?: number;
  maxRequestMemoryPerClient?: number;
  maxRequestMemoryPerNetwork?: number;
  maxModernRequests?: number;
  maxModernRequestsPerClient?: number;
}

/**
 * The admission of an /mcp POST, both MCP eras: its body takes an upload place (per address,
 * per network, overall) while it arrives, is weighed before it is parsed, and takes a place in
 * its client's, its network's and the total share of requests in flight until its response
 * ends; or it is refused (413, 429/503 with Retry-After).
 */
export class RequestAdmission {
  readonly maxBodyBytes: number;
  /** Bodies being received: per address, per network and overall. */
  private readonly arriving: RequestLimiter;
  /** Requests in flight, weighed before they were parsed (request-limits.ts). */
  private readonly inFlight: RequestLimiter;

  constructor(opts: AdmissionLimits = {}) {
    this.maxBodyBytes = opts.maxBodyBytes ?? 4 * 1024 * 1024;
    this.arriving = new RequestLimiter({ maxTotal: opts.maxPendingBodies ?? 16, maxPerClient: opts.maxPendingBodiesPerClient ?? 4 });
    this.inFlight = new RequestLimiter({
      maxTotal: opts.maxRequests ?? opts.maxModernRequests ?? 256,
      maxPerClient: opts.maxRequestsPerClient ?? opts.maxModernRequestsPerClient ?? 64,
      maxPerNetwork: opts.maxRequestsPerNetwork,
      maxTotalBytes: opts.maxRequestMemory ?? 256 * 1024 * 1024,
      maxBytesPerClient: opts.maxRequestMemoryPerClient ?? 64 * 1024 * 1024,
      maxBytesPerNetwork: opts.maxRequestMemoryPerNetwork,
    });
  }

  /**
   * Reads and admits a POST's body: the body, its place given back when `res` closes; or
   * undefined when the request was answered (refused) or cut, and nothing more is to be done.
   */
  async admit(req: IncomingMessage, res: ServerResponse, sessionId: string | undefined): Promise<Buffer | undefined> {
    const maxBodyBytes = this.maxBodyBytes;
    const tooLarge = () => sendJsonRpcError(res, 413, -32600, `request body larger than ${maxBodyBytes} bytes`);
    if (Number(header(req, 'content-length') ?? 0) > maxBodyBytes) {
      res.setHeader('connection', 'close');
      tooLarge();
      return undefined;
    }
    const address = req.socket.remoteAddress ?? 'unknown';
    const network = networkOf(req.socket.remoteAddress);
    const slot = this.arriving.admit(address, 0, network);
    if (!slot.ok) {
      res.setHeader('retry-after', '1');
      res.setHeader('connection', 'close');
      const from = slot.scope === 'total' ? '' : slot.scope === 'client' ? ' from this client' : " from this client's network";
      sendJsonRpcError(res, 503, -32000, `too many requests arriving at once (${slot.limit} bodies still being received${from}): retry shortly`);
      return undefined;
    }
    let raw: Buffer | null | undefined;
    try {
      raw = await readBody(req, maxBodyBytes).catch(() => undefined);
    } finally {
      slot.release();
    }
    // The client went away (or was cut at bodyTimeoutMs) mid-body: nobody to answer.
    if (raw === undefined) return void res.destroy();
    if (raw === null) return void tooLarge();
    // Weighed before it is parsed: what it will hold takes a place in its client's share
    // until its response ends, or it is refused unparsed.
    const { weight, id } = requestWeight(raw);
    const modernClient = !sessionId && (header(req, 'mcp-protocol-version') ?? '') >= '2026';
    const client = sessionId ? `session ${sessionId}` : `${modernClient ? 'client' : 'opening'} ${address}`;
    const place = this.inFlight.admit(client, weight, network);
    if (!place.ok) return void refuseInFlight(res, place, weight, id, sessionId ? 'session' : modernClient ? 'client' : 'opening');
    res.once('close', place.release);
    return raw;
  }
}

/**
 * A request refused unparsed for what is in flight: 429 with Retry-After naming the bound it
 * met, or 413 when it alone weighs more than a client may hold. Answered with its own id.
 */
function refuseInFlight(res: ServerResponse, refusal: Exclude<Admission, { ok: true }>, weight: number, id: string | number | null, who: 'session' | 'client' | 'opening'): void {
  let message: string;
  if (refusal.scope === 'request') {
    message = `request too heavy: parsed, it would hold about ${formatBytes(weight)}, more than one client may hold (${formatBytes(refusal.limit)}); send fewer JSON values`;
  } else {
    const era = who === 'client' ? '2026-07-28 requests' : 'requests';
    const from = refusal.scope === 'total' ? 'from all clients' : refusal.scope === 'network' ? "from this client's network" : who === 'session' ? 'in this MCP session' : 'from this client';
    const bound = refusal.what === 'requests' ? `${refusal.limit}` : `${formatBytes(refusal.limit)} weighed`;
    message =
      refusal.scope === 'total'
        ? `too many ${era} in flight (${bound} ${from}): retry shortly`
        : `too many ${era} in flight ${from} (${bound}): retry when one has ended`;
  }
  const text = JSON.stringify({ jsonrpc: '2.0', id, error: { code: -32000, message } });
  const status = refusal.scope === 'request' ? 413 : 429;
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...(status === 429 ? { 'retry-after': '1' } : {}) });
  res.end(text);
}
