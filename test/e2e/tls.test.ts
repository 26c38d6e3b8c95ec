/**
 * tether-only (issue 11, item 6): `wss://` with a certificate made here by openssl (a test
 * CA and a server certificate for 127.0.0.1; nothing committed). The client trusts a custom
 * CA through `ca` (library) or `--ca FILE` (exec), and nothing else.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { ExecClient } from '../../src/client/index.js';
import { collect } from '../helpers/client-util.js';
import { requireProgram } from '../helpers/prerequisites.js';
import { spawnServe, TETHER_BIN, type ServeProcess } from '../helpers/serve-process.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';

let dir: string;
let pem: { ca: string; otherCa: string; cert: string; key: string };

/** A CA, and a server certificate it signs for 127.0.0.1 and localhost (EC P-256, valid one day). */
function makeCertificates(into: string): typeof pem {
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: into, stdio: ['ignore', 'ignore', 'pipe'] });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  ssl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=tether test CA');
  ssl('req', '-x509', ...ec, '-keyout', 'other.key', '-out', 'other.pem', '-days', '1', '-subj', '/CN=someone else');
  ssl('req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1');
  writeFileSync(join(into, 'ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  ssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '1', '-extfile', 'ext');
  const read = (f: string) => readFileSync(join(into, f), 'utf8');
  return { ca: read('ca.pem'), otherCa: read('other.pem'), cert: read('server.pem'), key: read('server.key') };
}

beforeAll(() => {
  requireProgram('openssl');
  dir = mkdtempSync(join(tmpdir(), 'tether-tls-'));
  pem = makeCertificates(dir);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let target: TetherTarget | undefined;
let served: ServeProcess | undefined;
afterEach(async () => {
  await target?.stop();
  target = undefined;
  await served?.stop();
  served = undefined;
});

describe('TLS', () => {
  it('serves wss:// and runs a command for a client that trusts the CA', async () => {
    target = await startTetherServer({ tls: { cert: pem.cert, key: pem.key }, token: 'secret' });
    expect(target.url).toMatch(/^wss:\/\/127\.0\.0\.1:\d+$/);
    const client = await ExecClient.connect(target.url, { ca: pem.ca, token: 'secret' });
    try {
      const proc = client.spawn(['sh', '-c', 'echo over tls']);
      expect(await collect(proc.stdout)).toBe('over tls\n');
      expect(await proc.exited).toBe(0);
    } finally {
      await client.close();
    }
  });

  it('refuses a server whose certificate no trusted CA signed, and offers no plaintext', async () => {
    target = await startTetherServer({ tls: { cert: pem.cert, key: pem.key } });
    await expect(ExecClient.connect(target.url)).rejects.toThrow(/certificate/i);
    await expect(ExecClient.connect(target.url, { ca: pem.otherCa })).rejects.toThrow(/certificate/i);
    // A plain ws:// client gets no WebSocket from a TLS port.
    const plain = new WebSocket(target.url.replace('wss:', 'ws:'));
    const outcome = await new Promise<string>((resolve) => {
      plain.once('open', () => resolve('open'));
      plain.once('error', (err) => resolve(err.message));
    });
    plain.terminate();
    expect(outcome).not.toBe('open');
  });

  it('answers 503 with the reason inside TLS past the connection cap', async () => {
    target = await startTetherServer({ tls: { cert: pem.cert, key: pem.key }, maxConnections: 1 });
    const first = await ExecClient.connect(target.url, { ca: pem.ca });
    try {
      const ws = new WebSocket(target.url, { ca: pem.ca });
      const status = await new Promise<string>((resolve) => {
        ws.once('unexpected-response', (_req, res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve(`${res.statusCode} ${body}`));
        });
        ws.once('open', () => resolve('open'));
        ws.once('error', (err) => resolve(err.message));
      });
      ws.terminate();
      expect(status).toMatch(/^503 too many connections/);
    } finally {
      await first.close();
    }
  });

  it('tether serve --tls-cert/--tls-key prints wss://, and tether exec --ca runs a command there', async () => {
    served = await spawnServe(['--listen', 'ws://127.0.0.1:0', '--tls-cert', join(dir, 'server.pem'), '--tls-key', join(dir, 'server.key')]);
    expect(served.url).toMatch(/^wss:\/\/127\.0\.0\.1:\d+$/);
    const exec = (extra: string[]) =>
      new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
        const child = spawn(process.execPath, [TETHER_BIN, 'exec', '--url', served!.url, ...extra, '--', 'echo', 'hello'], {
          env: { ...process.env, TETHER_TOKEN: '' },
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
        child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
        child.once('close', (code) => resolve({ code, stdout, stderr }));
      });
    const ok = await exec(['--ca', join(dir, 'ca.pem')]);
    expect(ok).toMatchObject({ code: 0, stdout: 'hello\n' });
    const untrusted = await exec([]);
    expect(untrusted.code).not.toBe(0);
    expect(untrusted.stderr).toMatch(/certificate/i);
  });
});
