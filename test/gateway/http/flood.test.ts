/**
 * One client's heavy requests never crash the gateway, never take it past its request memory,
 * and never hold up another client's `echo` (docs/gateway.md, "Requests in flight").
 *
 * The attack, scaled down for a loaded CI machine: one client floods `tools/call` of a tool
 * that never answers, each request carrying a `_meta` of `{},{},…` (parsed, 4 MiB of it holds
 * some 90 MB of heap), first on one 2025-era MCP session, then as a 2026-07-28 client. Half
 * are the full 4 MiB, half 64 KiB (each admitted one holds its weight until it ends, so the
 * share in bytes is what stops them). The gateway runs as `tether gateway` with
 * `--max-request-memory 64MiB` (the default is 256 MiB: the flood is scaled to it) and a
 * V8 heap of 1 GiB, so the old gateway fails fast instead of eating the machine. Beside it,
 * a 2025 host and a 2026 host from other addresses call `echo` all along.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client as ClientV2, StreamableHTTPClientTransport as StreamableHttpV2 } from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { node, repoRoot, tetherBin, text } from '../../helpers/mcp-peers.js';

const MiB = 1024 * 1024;
/** What the gateway is configured to let requests in flight hold (--max-request-memory). */
const REQUEST_MEMORY = 64 * MiB;
/** Bodies arriving at once (16, the default) of at most 4 MiB (the default), held twice while joined. */
const BODIES = 16 * 4 * MiB * 2;
/** Node, the SDKs, the sockets: what an idle gateway and its garbage take besides (idle: about 90 MiB). */
const FIXED_OVERHEAD = 192 * MiB;
/** docs/gateway.md: an `echo` beside a flood is answered within this. */
const ECHO_BOUND_MS = 5000;
const FLOOD = 24; // of each size, per era
/** The heavy ones: a body just under the gateway's 4 MiB limit, all of it `{},`. */
const HEAVY = 4 * MiB - 1024;

const dir = mkdtempSync(path.join(tmpdir(), 'tether-gw-flood-'));
const cancelLog = path.join(dir, 'cancel.log');
let child: ChildProcess;
let url: string;
let stderr = '';

beforeAll(async () => {
  const config = path.join(dir, 'tether.json');
  writeFileSync(
    config,
    JSON.stringify({
      supervisor: { healthIntervalMs: 0 },
      mcpServers: { modern: { command: node, args: [path.join(repoRoot, 'test/fixtures/mcp-v2-server.mjs'), 'modern'], env: { V2_CANCEL_LOG: cancelLog } } },
    }),
  );
  child = spawn(node, ['--max-old-space-size=1024', tetherBin, 'gateway', '--listen', 'http://127.0.0.1:0', '--max-request-memory', '64MiB', config], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-20_000)));
  const [line] = (await Promise.race([once(createInterface({ input: child.stdout! }), 'line'), once(child, 'exit').then(() => [`(exited) ${stderr}`])])) as [string];
  expect(line).toMatch(/^http:\/\//);
  url = line;
}, 60_000);

afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) {
    child.kill('SIGTERM');
    await once(child, 'exit');
  }
  rmSync(dir, { recursive: true, force: true });
});

/** fetch over node:http from another loopback address (another client, as the gateway sees it). */
function fetchFrom(localAddress: string): typeof fetch {
  return ((target: string | URL, init: RequestInit = {}) =>
    new Promise<Response>((resolve, reject) => {
      const req = httpRequest(target, { method: init.method ?? 'GET', headers: Object.fromEntries(new Headers(init.headers)), localAddress, signal: init.signal ?? undefined }, (res) => {
        const headers = new Headers();
        for (const [k, v] of Object.entries(res.headers)) if (typeof v === 'string') headers.set(k, v);
        resolve(new Response(res.statusCode === 204 || res.statusCode === 202 ? null : (Readable.toWeb(res) as ReadableStream), { status: res.statusCode, headers }));
      });
      req.on('error', reject);
      req.end(typeof init.body === 'string' ? init.body : undefined);
    })) as typeof fetch;
}

const started = () => (existsSync(cancelLog) ? readFileSync(cancelLog, 'utf8').split('\n').filter((l) => l === 'started').length : 0);

/** The gateway's peak resident memory so far (VmHWM). */
function peakRss(): number {
  const kb = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))![1]!;
  return Number(kb) * 1024;
}

const pads = new Map<number, Buffer>();
/** `{},{},…,{}` of about `bytes`. */
function pad(bytes: number): Buffer {
  let p = pads.get(bytes);
  if (!p) pads.set(bytes, (p = Buffer.from(`${'{},'.repeat(Math.floor(bytes / 3))}{}`)));
  return p;
}

interface Outcome {
  /** The status of the answer that settled it (not 503), or 0 while admitted and waiting. */
  status: number;
  /** The error message of a refusal. */
  message?: string;
}

/**
 * One flood request: POSTed until the gateway takes it or refuses it for what is in flight
 * (a 503 "bodies arriving" is tried again, as a hostile client would). Settles with the
 * status of a final answer; a request the gateway admitted stays open in `held`.
 */
function floodOne(id: number, size: number, headers: Record<string, string>, meta: string, held: ClientRequest[], admitted: () => void): Promise<Outcome> {
  const head = Buffer.from(`{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"modern__wait","arguments":{},"_meta":{${meta}"pad":[`);
  const body = [head, pad(size), Buffer.from(']}}}')];
  const length = body.reduce((n, b) => n + b.length, 0);
  return new Promise<Outcome>((resolve) => {
    const attempt = (tries: number) => {
      let settled = false;
      const retry = () => {
        if (settled) return;
        settled = true;
        if (tries >= 400) resolve({ status: 503 });
        else setTimeout(() => attempt(tries + 1), 20); // the attacker's own pace, not a wait for anything
      };
      const req = httpRequest(`${url}/mcp`, { method: 'POST', agent: false, headers: { ...headers, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'content-length': String(length) } }, (res: IncomingMessage) => {
        if (res.statusCode === 503) {
          res.resume();
          return retry();
        }
        settled = true;
        if (res.statusCode === 200) {
          held.push(req);
          admitted();
          resolve({ status: 0 });
          return;
        }
        let answer = '';
        res.setEncoding('utf8').on('data', (d: string) => (answer += d));
        res.on('end', () => resolve({ status: res.statusCode ?? -1, message: (JSON.parse(answer) as { error?: { message?: string } }).error?.message }));
      });
      req.on('error', retry);
      for (const b of body) req.write(b);
      req.end();
    };
    attempt(0);
  });
}

/** Echo from both victims, over and over, until `done`; each answer's time. */
async function echoes(v1: Client, v2: ClientV2, done: { stop: boolean }): Promise<number[]> {
  const times: number[] = [];
  while (!done.stop) {
    for (const call of [
      () => v1.callTool({ name: 'modern__echo', arguments: { message: 'v1' } }),
      () => v2.callTool({ name: 'modern__echo', arguments: { message: 'v2' } }),
    ]) {
      const t0 = performance.now();
      const result = await call();
      times.push(performance.now() - t0);
      expect(text(result)).toMatch(/^Echo \(modern\): v[12]$/);
    }
  }
  return times;
}

describe('a _meta flood beside a victim', () => {
  it('on one 2025 session, then from a 2026 client: no crash, every victim echo within the bound, RSS under the configured total plus a fixed overhead', async () => {
    // The backend connected: its tools are listed.
    await expect.poll(async () => ((await fetch(`${url}/mcp/servers`).then((r) => r.json())) as { servers: { status: string }[] }).servers[0]?.status, { timeout: 30_000 }).toBe('connected');
    const v1 = new Client({ name: 'victim-2025', version: '1.0.0' });
    await v1.connect(new StreamableHTTPClientTransport(new URL(`${url}/mcp`), { fetch: fetchFrom('127.0.0.3') }));
    const v2 = new ClientV2({ name: 'victim-2026', version: '1.0.0' }, { versionNegotiation: { mode: { pin: '2026-07-28' } } });
    await v2.connect(new StreamableHttpV2(new URL(`${url}/mcp`), { fetch: fetchFrom('127.0.0.2') }));
    const held: ClientRequest[] = [];
    const allTimes: number[] = [];
    try {
      // The attacker's 2025 session.
      const init = await fetch(`${url}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'flood', version: '1' } } }),
      });
      const session = init.headers.get('mcp-session-id')!;
      await init.text();
      const sessionHeaders = { 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' };
      await fetch(`${url}/mcp`, { method: 'POST', headers: { ...sessionHeaders, 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: '{"jsonrpc":"2.0","method":"notifications/initialized"}' }).then((r) => r.text());

      const modernMeta = '"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"flood","version":"1"},"io.modelcontextprotocol/clientCapabilities":{},';
      const eras = [
        { headers: sessionHeaders, meta: '' },
        { headers: { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'modern__wait' }, meta: modernMeta },
      ];
      let id = 1;
      for (const era of eras) {
        const before = started();
        let admitted = 0;
        const done = { stop: false };
        const victims = echoes(v1, v2, done);
        const flood = Array.from({ length: 2 * FLOOD }, (_, i) => floodOne(id++, i % 2 ? HEAVY : 64 * 1024, era.headers, era.meta, held, () => admitted++));
        const outcomes = await Promise.all(flood);
        // Every admitted call reached the tool (so it holds its place while the echoes go on).
        await expect.poll(started, { timeout: 30_000 }).toBe(before + admitted);
        done.stop = true;
        allTimes.push(...(await victims));
        // One more echo each while the attacker holds all it was given.
        const t0 = performance.now();
        expect(text(await v1.callTool({ name: 'modern__echo', arguments: { message: 'v1' } }))).toBe('Echo (modern): v1');
        expect(text(await v2.callTool({ name: 'modern__echo', arguments: { message: 'v2' } }))).toBe('Echo (modern): v2');
        allTimes.push((performance.now() - t0) / 2);

        const statuses = outcomes.map((o) => o.status);
        // The 4 MiB ones weigh more than a client may hold: refused unparsed (413).
        expect(statuses.filter((s, i) => i % 2 === 1).every((s) => s === 413)).toBe(true);
        expect(outcomes[1]!.message).toMatch(/^request too heavy: parsed, it would hold about \d+MiB, more than one client may hold \(16MiB\)/);
        // The 64 KiB ones: a few admitted, the rest refused for the client's share (429).
        expect(admitted).toBeGreaterThan(0);
        expect(statuses.filter((s) => s === 429).length).toBeGreaterThan(0);
        // (Its share, or loopback's while the places of the era before are still being given back.)
        expect(outcomes.find((o) => o.status === 429)!.message).toMatch(
          era.meta ? /too many 2026-07-28 requests in flight from this client('s network)? \((16|32)MiB weighed\)/ : /too many requests in flight (in this MCP session|from this client's network) \((16|32)MiB weighed\)/,
        );
        expect(statuses.every((s) => s === 0 || s === 413 || s === 429)).toBe(true);
        for (const r of held.splice(0)) r.destroy();
      }
      expect(child.exitCode, stderr).toBeNull();
      expect((await fetch(`${url}/healthz`)).status).toBe(200);
      const peak = peakRss();
      process.stderr.write(`gateway flood: peak RSS ${(peak / MiB).toFixed(0)} MiB (bound ${((REQUEST_MEMORY + BODIES + FIXED_OVERHEAD) / MiB).toFixed(0)} MiB); ${allTimes.length} echoes, slowest ${Math.max(...allTimes).toFixed(0)} ms\n`);
      expect(peak).toBeLessThan(REQUEST_MEMORY + BODIES + FIXED_OVERHEAD);
      expect(Math.max(...allTimes)).toBeLessThan(ECHO_BOUND_MS);
    } finally {
      for (const r of held) r.destroy();
      await v1.close().catch(() => {});
      await v2.close().catch(() => {});
    }
  }, 180_000);
});
