/**
 * The local back-end's HTTP work (backend/http-work.ts): one `http/request` sent with node:http
 * and node:https, on a socket of its own, redirects followed as reqwest follows them.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { RequestTimeouts, HttpRequestWork, HttpResponseLike } from '../backend/index.js';

const MAX_REDIRECTS = 10;

/** The local back-end's request: node:http(s), a socket of its own. */
export async function sendLocal(work: HttpRequestWork): Promise<HttpResponseLike> {
  const response = await send(work.method, work.url, work.headers, work.body, work.follow, work.signal, work.deadlines);
  const announced = Number(response.headers['content-length']);
  return {
    status: response.statusCode ?? 0,
    headers: headerList(response),
    contentLength: Number.isSafeInteger(announced) && announced >= 0 ? announced : undefined,
    destroy: () => response.destroy(),
    [Symbol.asyncIterator]: () => response[Symbol.asyncIterator]() as AsyncIterator<Buffer>,
  };
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

