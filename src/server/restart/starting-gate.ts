/**
 * What a server on a state dir answers between its bind and its first client (restart adoption):
 * it listens before it adopts its predecessor's keepers (a port it cannot bind then costs
 * nothing: no keeper was touched), and while it adopts, every request is answered 503 with
 * what it waits for: `/readyz` as `{"ready":false,"reason":…}`, an upgrade as
 * `server is starting: …` (a client retries a 503 as it does while a server shuts down).
 * No session exists yet, so nothing else could be answered.
 */
import type { IncomingMessage, Server as HttpServer, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';

/** Answers every request and upgrade on `http` with 503 and `reason()`; returns what removes that. */
export function answerWhileStarting(http: HttpServer, reason: () => string): () => void {
  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0];
    const body = path === '/readyz' ? JSON.stringify({ ready: false, reason: reason() }) : `server is starting: ${reason()}`;
    res.writeHead(503, { 'content-type': path === '/readyz' ? 'application/json' : 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(body), connection: 'close' });
    res.end(req.method === 'HEAD' ? undefined : body);
  };
  const onUpgrade = (_req: IncomingMessage, socket: Duplex) => {
    socket.on('error', () => {});
    const body = `server is starting: ${reason()}`;
    socket.end(`HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  };
  http.on('request', onRequest);
  http.on('upgrade', onUpgrade);
  return () => {
    http.off('request', onRequest);
    http.off('upgrade', onUpgrade);
  };
}
