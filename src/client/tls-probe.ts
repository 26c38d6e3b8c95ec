/**
 * Whether a `ws://` URL's port speaks TLS: Node's TLS server (a `tether serve --tls-cert`)
 * answers a plain-HTTP upgrade by closing the socket, which looks like a server going away.
 * A TLS handshake with that port tells the two apart (the certificate is not checked: only
 * whether the port answers in TLS; no byte of the session is sent).
 */
import { connect } from 'node:tls';

export function speaksTls(url: URL, timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    const host = url.hostname.replace(/^\[|\]$/g, '');
    const socket = connect({ host, port: Number(url.port || 80), rejectUnauthorized: false, ...(/^[\d.:]+$/.test(host) ? {} : { servername: host }) });
    const done = (answer: boolean) => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      socket.removeAllListeners();
      socket.on('error', () => {});
      socket.destroy();
      resolve(answer);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    const onAbort = () => done(false);
    signal?.addEventListener('abort', onAbort, { once: true });
    socket.once('secureConnect', () => done(true));
    socket.once('error', () => done(false));
    socket.once('close', () => done(false));
  });
}
