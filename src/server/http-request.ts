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
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { z } from 'zod';
import { internalError, invalidParams, parseParams } from '../protocol/index.js';
import type { Connection } from './connection.js';
import { decodeBase64 } from './fs/base64.js';
import type { ByteBudget } from './fs/budget.js';
import type { OutgoingSockets } from './http-sockets.js';
import { HttpTimeoutDefaults, RequestTimeouts, type HttpTimeoutLimits } from './http-timeouts.js';

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
const MAX_REDIRECTS = 10;

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
export async function httpRequestMethod(raw: unknown, conn: Connection, limits: HttpLimits, requireReady: () => object): Promise<HttpRequestResult> {
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
  let response: IncomingMessage;
  try {
    response = await send(p.method, url, headers, body, p.redirectPolicy !== 'stop', abort.signal, deadlines);
  } catch {
    release();
    throw internalError(`http/request failed: error sending request for url (${url.href})`);
  }
  const result: HttpRequestResult = { status: response.statusCode ?? 0, headers: headerList(response), bodyBase64: '' };
  if (p.streamResponse) {
    void streamBody(response, conn, p.requestId, abort.signal, deadlines).finally(release);
    return result;
  }
  let giveBack = () => {};
  try {
    // The whole body is reserved at once (its announced length, or the cap): reserving piece by
    // piece, requests that each hold part of the budget could wait for one another forever.
    const announced = Number(response.headers['content-length']);
    const want = Number.isSafeInteger(announced) && announced >= 0 ? Math.min(announced, limits.maxBufferedBodyBytes) : limits.maxBufferedBodyBytes;
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

/** One request, following redirects the way reqwest does (303, and 301/302 for other than GET/HEAD, become a GET without body). */
async function send(
  method: string,
  url: URL,
  headers: Array<{ name: string; value: string }>,
  body: Buffer | undefined,
  follow: boolean,
  signal: AbortSignal,
  deadlines: RequestTimeouts,
): Promise<IncomingMessage> {
  for (let redirects = 0; ; redirects++) {
    const response = await once(method, url, headers, body, signal, deadlines);
    const location = response.headers.location;
    const status = response.statusCode ?? 0;
    if (!follow || ![301, 302, 303, 307, 308].includes(status) || !location || redirects >= MAX_REDIRECTS) return response;
    response.destroy(); // the redirect's own body is not wanted, nor its socket kept open
    const next = new URL(location, url);
    if (next.protocol !== 'http:' && next.protocol !== 'https:') return response;
    if (status === 303 || ((status === 301 || status === 302) && method !== 'GET' && method !== 'HEAD')) {
      method = 'GET';
      body = undefined;
      headers = headers.filter((h) => !/^(content-type|content-length|transfer-encoding)$/i.test(h.name));
    }
    headers = [...headers.filter((h) => h.name.toLowerCase() !== 'referer'), { name: 'referer', value: url.href }];
    url = next;
  }
}

function once(
  method: string,
  url: URL,
  headers: Array<{ name: string; value: string }>,
  body: Buffer | undefined,
  signal: AbortSignal,
  deadlines: RequestTimeouts,
): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    // agent: false: a socket of its own, closed with the response (a pooled, kept-alive one
    // would hold a descriptor outside the cap).
    const request = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, { method, signal, setHost: false, agent: false });
    deadlines.connecting();
    request.once('socket', (socket) => {
      if (!socket.connecting) deadlines.activity();
      else socket.once('connect', () => deadlines.activity());
      socket.on('data', () => deadlines.activity());
    });
    // Header names go out in lower case, as hyper sends them (repeats of a name together);
    // reqwest adds accept: */*; Node's own Connection header is left out, as hyper does.
    const byName = new Map<string, string[]>();
    for (const { name, value } of headers) {
      const key = name.toLowerCase();
      byName.set(key, [...(byName.get(key) ?? []), value]);
    }
    if (!byName.has('accept')) byName.set('accept', ['*/*']);
    byName.set('host', [url.host]);
    if (body !== undefined) byName.set('content-length', [String(body.length)]);
    for (const [name, values] of byName) request.setHeader(name, values.length === 1 ? values[0]! : values);
    if (!byName.has('connection')) request.removeHeader('connection');
    request.once('response', resolve);
    request.once('error', reject);
    request.end(body);
  });
}

function headerList(response: IncomingMessage): Array<{ name: string; value: string }> {
  const list: Array<{ name: string; value: string }> = [];
  for (let i = 0; i + 1 < response.rawHeaders.length; i += 2) list.push({ name: response.rawHeaders[i]!.toLowerCase(), value: response.rawHeaders[i + 1]! });
  return list;
}

async function readBody(response: IncomingMessage, limit: number, url: URL, deadlines: RequestTimeouts): Promise<Buffer> {
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
async function streamBody(response: IncomingMessage, conn: Connection, requestId: string, signal: AbortSignal, deadlines: RequestTimeouts): Promise<void> {
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
