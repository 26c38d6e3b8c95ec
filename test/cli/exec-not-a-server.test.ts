/**
 * `tether exec` pointed at something that is not a tether or Codex exec-server (a web server
 * answering the upgrade with its HTML page, a 404, a plain-HTTP port spoken to in TLS, a TLS
 * port spoken to in plain ws://) fails at once, in one line, quoting no HTML: the server is
 * connected to once, not retried for the recovery deadline. A 503 (a proxy whose upstream
 * restarts) is still retried. Each attempt is counted by the server's own connection events.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runTether } from '../helpers/cli.js';
import { requireProgram } from '../helpers/prerequisites.js';

const PAGE = `<!DOCTYPE html>\n<html>\n<head><title>Welcome</title></head>\n<body>\n${Array.from({ length: 20 }, (_, i) => `<p>paragraph ${i}</p>`).join('\n')}\n</body>\n</html>\n`;

interface Counted {
  server: Server;
  port: number;
  connections: number;
}

const servers: Counted[] = [];
let dir: string;
let tls: { key: string; cert: string };

/** A server whose every answer is `status` with an HTML page; counts the TCP connections it accepts. */
async function serve(status: number, secure = false): Promise<Counted> {
  const handler = (_req: unknown, res: import('node:http').ServerResponse) => {
    res.writeHead(status, { 'content-type': 'text/html; charset=utf-8' });
    res.end(PAGE);
  };
  const server = secure ? createHttpsServer(tls, handler) : createHttpServer(handler);
  const counted: Counted = { server, port: 0, connections: 0 };
  server.on('connection', () => counted.connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  counted.port = (server.address() as AddressInfo).port;
  servers.push(counted);
  return counted;
}

beforeAll(() => {
  requireProgram('openssl');
  dir = mkdtempSync(join(tmpdir(), 'tether-not-a-server-'));
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'key.pem', '-out', 'cert.pem', '-days', '1', '-subj', '/CN=127.0.0.1'], {
    cwd: dir,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  tls = { key: readFileSync(join(dir, 'key.pem'), 'utf8'), cert: readFileSync(join(dir, 'cert.pem'), 'utf8') };
});
afterAll(async () => {
  for (const { server } of servers) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
  rmSync(dir, { recursive: true, force: true });
});

/** stderr's lines. */
function lines(stderr: string): string[] {
  return stderr.split('\n').filter((l) => l !== '');
}

describe('tether exec against a server that is not an exec-server', () => {
  // Long enough for several retries (backoff from 100 ms), were the answer taken for a transient failure.
  const DEADLINE = ['--recovery-deadline', '5s'];

  it.each([
    [200, /HTTP 200 OK \(text\/html\): not a tether or Codex exec-server at this URL$/],
    [404, /HTTP 404 Not Found \(text\/html\): not a tether or Codex exec-server at this URL$/],
  ])('HTTP %i with an HTML page: one attempt, one line, no HTML, exit 255', async (status, says) => {
    const web = await serve(status);
    const url = `ws://127.0.0.1:${web.port}`;
    const run = await runTether(['exec', '--url', url, ...DEADLINE, 'true'], { input: '' });
    expect(run.code).toBe(255);
    expect(lines(run.stderr)).toEqual([expect.stringMatching(new RegExp(`^tether exec: cannot connect to ${url}: server answered the WebSocket upgrade with `))]);
    expect(run.stderr.trim()).toMatch(says);
    expect(run.stderr).not.toMatch(/<|paragraph/);
    expect(web.connections).toBe(1);
  });

  it('wss:// to a plain-HTTP port: one attempt, one line naming the mismatch', async () => {
    const web = await serve(200);
    const url = `wss://127.0.0.1:${web.port}`;
    const run = await runTether(['exec', '--url', url, ...DEADLINE, 'true'], { input: '' });
    expect(run.code).toBe(255);
    expect(lines(run.stderr)).toEqual([`tether exec: cannot connect to ${url}: TLS handshake failed (wrong version number): the server does not speak TLS there (a ws:// URL?)`]);
    expect(web.connections).toBe(1);
  });

  it('ws:// to a TLS port: one line naming the mismatch, no retries', async () => {
    const web = await serve(200, true);
    const url = `ws://127.0.0.1:${web.port}`;
    const run = await runTether(['exec', '--url', url, ...DEADLINE, 'true'], { input: '' });
    expect(run.code).toBe(255);
    expect(lines(run.stderr)).toEqual([`tether exec: cannot connect to ${url}: the server speaks TLS there: use wss://127.0.0.1:${web.port}`]);
    // The upgrade, and the TLS probe that recognised the server.
    expect(web.connections).toBe(2);
  });

  it('HTTP 503 (a proxy whose upstream restarts) is still retried until the deadline', async () => {
    const proxy = await serve(503);
    const url = `ws://127.0.0.1:${proxy.port}`;
    const run = await runTether(['exec', '--url', url, '--recovery-deadline', '1s', 'true'], { input: '' });
    expect(run.code).toBe(255);
    expect(proxy.connections).toBeGreaterThan(1);
    const said = lines(run.stderr);
    expect(said[0]).toBe(`tether exec: cannot reach ${url} (server answered the WebSocket upgrade with HTTP 503 Service Unavailable); retrying for up to 1 s`);
    expect(said.at(-1)).toMatch(/HTTP 503 Service Unavailable \(\d+ attempts in 1 s, the recovery deadline\)$/);
    expect(run.stderr).not.toMatch(/<|paragraph/);
  });
});
