/**
 * `http/request`: an HTTP request made from the exec-server's host (an agent reaching a
 * service only that host can reach), with Codex 0.169's shapes and texts: the answer is
 * `{status, headers: [{name, value}], bodyBase64}`; with `streamResponse` it comes once the
 * headers are in and the body follows as `http/request/bodyDelta {requestId, seq,
 * deltaBase64, done, error}` notifications, the last one `done: true`. Redirects are followed
 * (at most 10, as reqwest does) unless `redirectPolicy: "stop"`.
 *
 * Bounded: a buffered body is capped (larger ones must stream) and reserved from its own
 * session's share (never the fs data budget: a body that trickles in must not starve other
 * sessions' reads), a streamed body waits for the connection's send buffer to drain, and a
 * stream ends when its connection closes. Each request has its own socket, counted against a
 * per-session and a server-wide cap (http-sockets.ts), a connect timeout and an idle timeout
 * (http-timeouts.ts), but no total one: a long body that keeps coming is not cut.
 */
import { z } from 'zod';
import { internalError, invalidParams, parseParams, RpcError } from '../../protocol/index.js';
import type { Connection } from '../connection/index.js';
import { decodeBase64, type ByteBudget } from '../fs/index.js';
import type { OutgoingSockets } from './http-sockets.js';
import { HttpTimeoutDefaults, RequestTimeouts, type HttpTimeoutLimits, type HttpRequestWork, type HttpResponseLike } from '../backend/index.js';

export const HttpMethod = { request: 'http/request', bodyDelta: 'http/request/bodyDelta' } as const;

export const HttpRequestParamsSchema = z.object({
  method: z.string(),
  url: z.string(),
  headers: z.array(z.object({ name: z.string(), value: z.string() })).nullish(),
  bodyBase64: z.string().nullish(),
  timeoutMs: z.number().int().nonnegative().nullish(),
  requestId: z.string(),
  streamResponse: z.boolean().nullish(),
  redirectPolicy: z.enum(['follow', 'stop']).nullish(),
});

export interface HttpRequestResult {
  status: number;
  headers: Array<{ name: string; value: string }>;
  bodyBase64: string;
}

/** RFC 9110 token: what a method or a header name may be made of. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

export interface HttpLimits {
  /** Largest body answered in one message; larger ones need `streamResponse` (8 MiB). */
  maxBufferedBodyBytes: number;
  /**
   * Where a buffered body's bytes are reserved before it is read: the session's own share,
   * counted in the memory budget. Bodies that do not fit wait their turn, their responses unread.
   */
  memory?: (session: object) => ByteBudget;
  /** The outgoing socket caps, counted per session. */
  sockets?: OutgoingSockets;
  /** Connect and idle timeouts (default `HttpTimeoutDefaults`). */
  timeouts?: HttpTimeoutLimits;
}

/** Streams in flight per connection (a requestId is unique on its connection until its last delta). */
const activeStreams = new WeakMap<Connection, Set<string>>();

/**
 * Handles one `http/request`; `requireReady` is the handshake check (after the params, as in
 * Codex), which gives the session the request counts against.
 */
export async function httpRequestMethod(
  raw: unknown,
  conn: Connection,
  limits: HttpLimits,
  requireReady: () => { backend: { httpRequest(request: HttpRequestWork): Promise<HttpResponseLike> } },
): Promise<HttpRequestResult> {
  const p = parseParams(HttpMethod.request, HttpRequestParamsSchema, raw);
  const session = requireReady();
  let url: URL;
  try {
    url = new URL(p.url);
  } catch {
    throw invalidParams(`http/request url is invalid: ${/^[A-Za-z][A-Za-z0-9+.-]*:/.test(p.url.trim()) ? 'invalid URL' : 'relative URL without a base'}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalidParams(`http/request only supports http and https URLs, got ${url.protocol.slice(0, -1)}`);
  if (!TOKEN.test(p.method)) throw invalidParams('http/request method is invalid: invalid HTTP method');
  const headers = p.headers ?? [];
  for (const { name, value } of headers) {
    if (!TOKEN.test(name)) throw invalidParams('http/request header name is invalid: invalid HTTP header name');
    if (/[\r\n\0]/.test(value)) throw invalidParams('http/request header value is invalid: failed to parse header value');
  }
  let body: Buffer | undefined;
  if (p.bodyBase64) {
    const decoded = decodeBase64(p.bodyBase64);
    if (!decoded.ok) throw invalidParams(decoded.message);
    body = decoded.bytes;
  }
  const socket = limits.sockets?.take(session);
  if (socket && 'refusal' in socket) throw internalError(`http/request failed: ${socket.refusal}`);
  let streams = activeStreams.get(conn);
  if (p.streamResponse) {
    if (!streams) activeStreams.set(conn, (streams = new Set()));
    if (streams.has(p.requestId)) {
      socket?.give();
      throw invalidParams(`http/request streamResponse requestId \`${p.requestId}\` is already active`);
    }
    streams.add(p.requestId);
  }
  const abort = new AbortController();
  const onClose = () => abort.abort(new Error('connection closed'));
  conn.signal.addEventListener('abort', onClose, { once: true });
  const timer = p.timeoutMs !== undefined && p.timeoutMs !== null ? setTimeout(() => abort.abort(new Error('timed out')), p.timeoutMs) : undefined;
  const deadlines = new RequestTimeouts(limits.timeouts ?? HttpTimeoutDefaults, (reason) => abort.abort(reason));
  const release = () => {
    clearTimeout(timer);
    deadlines.stop();
    socket?.give();
    conn.signal.removeEventListener('abort', onClose);
    streams?.delete(p.requestId);
  };
  let response: HttpResponseLike;
  try {
    const work: HttpRequestWork = { method: p.method, url, headers, body, follow: p.redirectPolicy !== 'stop', signal: abort.signal, deadlines, timeoutMs: p.timeoutMs };
    response = await session.backend.httpRequest(work);
  } catch (err) {
    release();
    // A back-end that forwards the request may have the wire's own error to tell.
    if (err instanceof RpcError) throw err;
    throw internalError(`http/request failed: error sending request for url (${url.href})`);
  }
  const result: HttpRequestResult = { status: response.status, headers: response.headers, bodyBase64: '' };
  if (p.streamResponse) {
    void streamBody(response, conn, p.requestId, abort.signal, deadlines).finally(release);
    return result;
  }
  let giveBack = () => {};
  try {
    // The whole body is reserved at once (its announced length, or the cap): reserving piece by
    // piece, requests that each hold part of the budget could wait for one another forever.
    const announced = response.contentLength;
    const want = announced !== undefined ? Math.min(announced, limits.maxBufferedBodyBytes) : limits.maxBufferedBodyBytes;
    if (limits.memory) {
      deadlines.pause(); // waiting for our own memory is not upstream's idleness
      giveBack = await limits.memory(session).acquire(want, abort.signal).catch(() => {
        response.destroy();
        throw internalError(`http/request failed: error reading the response body of ${url.href}`);
      });
      deadlines.activity();
    }
    result.bodyBase64 = (await readBody(response, limits.maxBufferedBodyBytes, url, deadlines)).toString('base64');
    return result;
  } finally {
    giveBack();
    release();
  }
}

async function readBody(response: HttpResponseLike, limit: number, url: URL, deadlines: RequestTimeouts): Promise<Buffer> {
  deadlines.activity();
  const parts: Buffer[] = [];
  let total = 0;
  try {
    for await (const chunk of response) {
      total += (chunk as Buffer).length;
      if (total > limit) {
        response.destroy();
        throw invalidParams(`http/request response body exceeds ${limit} bytes; ask for it with streamResponse: true`);
      }
      parts.push(chunk as Buffer);
    }
  } catch (err) {
    if ((err as { code?: unknown }).code === -32602) throw err;
    throw internalError(`http/request failed: error reading the response body of ${url.href}`);
  }
  return Buffer.concat(parts, total);
}

/** The body as bodyDelta notifications, in order, never faster than the connection takes them. */
async function streamBody(response: HttpResponseLike, conn: Connection, requestId: string, signal: AbortSignal, deadlines: RequestTimeouts): Promise<void> {
  let seq = 0;
  const delta = (chunk: Buffer, done: boolean, error: string | null) =>
    conn.sendNotification(HttpMethod.bodyDelta, { requestId, seq: ++seq, deltaBase64: chunk.toString('base64'), done, error });
  try {
    for await (const chunk of response) {
      delta(chunk as Buffer, false, null);
      if (conn.backpressured) {
        deadlines.pause(); // our client is slow, not upstream
        await conn.whenDrained();
        deadlines.activity();
      }
    }
    delta(Buffer.alloc(0), true, null);
  } catch (err) {
    if (!signal.aborted || !conn.closed) delta(Buffer.alloc(0), true, `error reading a response body: ${(err as Error).message}`);
  }
}
