/**
 * A server that dies without a word (kill -9, a crashed host) behind a plain TCP proxy (an
 * ssh -L tunnel, a load balancer): the proxy drops the link it carries, and from then on it
 * accepts each new connection and closes it, since nothing listens behind it any more. (A
 * tether server that is stopped says so before its socket goes, and its clients fail at once
 * with 'stopped': test/server/stop-notice.test.ts. This is the other case.)
 */
import net from 'node:net';
import type { ChaosProxy } from '../../src/chaos/proxy.js';

/** A loopback port nothing listens on (bound once, then released). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export async function serverDiesSilently(proxy: ChaosProxy): Promise<void> {
  proxy.setTarget(await closedPort());
  proxy.cutAll();
}
