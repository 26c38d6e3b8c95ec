/**
 * tether-only (issue 11, items 6-7): who may reach the server at all. A loopback listener
 * checks `Host` (DNS rebinding) without comparing the port (ssh -L); a non-loopback
 * listener without a token is refused at start.
 */
import { request as httpRequest } from 'node:http';
import { describe, expect, it } from 'vitest';
import { parseServeArgs } from '../../../src/cli/serve/serve.js';
import { InsecureConfigError, startServer } from '../../../src/server/index.js';
import { hostOfHeader, isAllowedLoopbackHost, isLoopbackName } from '../../../src/util/loopback.js';
import { RawClient } from '../../helpers/raw-client.js';
import { spawnServe } from '../../helpers/serve-process.js';
import { tetherAfterEach } from '../../helpers/tether-per-test.js';

const servers = tetherAfterEach();
const { pool } = servers;

/** GET `path` with a given Host header; resolves with status and body. */
function get(port: number, path: string, host: string, address = '127.0.0.1'): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: address, port, path, headers: { host } }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('loopback names', () => {
  it('knows loopback names and addresses, and nothing that merely looks like one', () => {
    for (const n of ['localhost', 'LocalHost', 'localhost.', 'app.localhost', '127.0.0.1', '127.1.2.3', '::1', '[::1]', '::ffff:127.0.0.1']) {
      expect(isLoopbackName(n), n).toBe(true);
    }
    for (const n of ['0.0.0.0', '::', '10.0.0.1', 'localhost.evil.example', '127.0.0.1.nip.io', 'evil.example', 'localhostx', '128.0.0.1']) {
      expect(isLoopbackName(n), n).toBe(false);
    }
  });

  it('accepts a loopback Host on any port (ssh -L), no Host at all, or a listed name; refuses the rest', () => {
    for (const h of ['localhost:9000', 'localhost', '127.0.0.1:8765', '[::1]:1', 'app.localhost:3000']) expect(isAllowedLoopbackHost(h), h).toBe(true);
    expect(isAllowedLoopbackHost(undefined)).toBe(true);
    expect(isAllowedLoopbackHost('devbox:8765', new Set(['devbox']))).toBe(true);
    for (const h of ['evil.example:8765', 'evil.example', 'localhost@evil.example', 'localhost:80:80', '', ' ', 'localhost/x', '[::1']) {
      expect(isAllowedLoopbackHost(h), h).toBe(false);
    }
    expect(hostOfHeader('[::1]:8765')).toBe('[::1]');
  });
});

describe('Host check on a loopback listener', () => {
  it('refuses an upgrade or a request whose Host is not loopback with 403 and the reason', async () => {
    const target = await servers.start();
    const refused = await RawClient.connect(target.url, { headers: { host: 'rebound.evil.example:8765' } }).then(
      () => null,
      (err: { status?: number; body?: string }) => err,
    );
    expect(refused?.status).toBe(403);
    expect(refused?.body).toMatch(/host not allowed.*rebound\.evil\.example.*--allow-host/);
    expect((await get(target.server.port, '/readyz', 'rebound.evil.example')).status).toBe(403);
    expect((await get(target.server.port, '/readyz', 'localhost:1')).status).toBe(200);
  });

  it('accepts localhost on another port (ssh -L 9000:localhost:8765) and names added with allowedHosts', async () => {
    const target = await servers.start({ allowedHosts: ['DevBox'] });
    const forwarded = await pool.connect(target.url, { headers: { host: 'localhost:9000' } });
    await forwarded.handshake();
    const named = await pool.connect(target.url, { headers: { host: 'devbox:8765' } });
    await named.handshake();
  });
});

describe('non-loopback listener', () => {
  it('is refused at start without a token, before anything listens', async () => {
    for (const host of ['0.0.0.0', '::', '192.0.2.1', 'example.invalid']) {
      await expect(startServer({ host, port: 0 })).rejects.toThrow(InsecureConfigError);
    }
    await expect(startServer({ host: '0.0.0.0', port: 0 })).rejects.toThrow(/without a token.*--insecure-no-token/);
  });

  // Issue 22 item 9: `--listen ws://evil.localhost:0` bound wherever the name resolved, with
  // no token, because loopback was decided on the name. The resolver is injected: nothing
  // here ever binds or sends to a non-loopback address.
  it('decides loopback on the address a name resolves to, and binds that very address', async () => {
    const asked: string[] = [];
    const offLoopback = async (name: string) => (asked.push(name), { address: '10.9.9.9', family: 4 });
    const refused = await startServer({ host: 'evil.localhost', port: 0, lookup: offLoopback }).then(
      async (server) => (await server.close(), null),
      (err: Error) => err,
    );
    expect(refused).toBeInstanceOf(InsecureConfigError);
    expect(refused?.message).toMatch(/refusing to listen on evil\.localhost \(it resolves to 10\.9\.9\.9, not a loopback address\) without a token/);
    expect(asked).toEqual(['evil.localhost']);

    // A loopback answer is bound exactly (127.0.0.7, not whatever `listen` would resolve), and
    // the name it was given is one of its own Host names.
    const server = await startServer({ host: 'devbox.localhost', port: 0, lookup: async () => ({ address: '127.0.0.7', family: 4 }) });
    try {
      expect(server.loopback).toBe(true);
      expect(await get(server.port, '/readyz', `devbox.localhost:${server.port}`, '127.0.0.7')).toMatchObject({ status: 200 });
      expect(await get(server.port, '/readyz', 'evil.example', '127.0.0.7')).toMatchObject({ status: 403 });
    } finally {
      await server.close();
    }
  });

  it('tether serve exits 2 saying why, and --insecure-no-token is the explicit override', async () => {
    const failed = await spawnServe(['--listen', 'ws://0.0.0.0:0']).then(
      () => null,
      (err: Error) => err,
    );
    expect(failed?.message).toMatch(/exited 2 .*refusing to listen on 0\.0\.0\.0 without a token/);
    expect(parseServeArgs(['--listen', 'ws://0.0.0.0:0', '--insecure-no-token'], {}).options.insecureNoToken).toBe(true);
    expect(parseServeArgs(['--allow-host', 'devbox'], {}).options.allowedHosts).toEqual(['devbox']);
  });
});
