/** tether-only: GET /metrics (parsed by a real Prometheus text-format parser) and the audit trail. */
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import parsePrometheusTextFormat, { type ParsedFamily } from 'parse-prometheus-text-format';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChaosProxy } from '../../../src/chaos/proxy.js';
import { ExecClient, type ExecProcess } from '../../../src/client/index.js';
import { startServer, type TetherServer } from '../../../src/server/index.js';

const OUTPUT_RETENTION = 64 * 1024;

/** Everything a stream gives until it ends, as bytes. */
async function drain(proc: ExecProcess): Promise<number> {
  let bytes = 0;
  proc.stdout.on('data', (d: Buffer) => (bytes += d.length));
  await proc.closed;
  return bytes;
}

async function scrape(server: TetherServer, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`http://127.0.0.1:${server.port}/metrics`, { headers });
}

/** metric name (+ labels) → value, from the parsed families. */
function values(families: ParsedFamily[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const family of families) {
    for (const sample of family.metrics) {
      const labels = Object.entries(sample.labels ?? {})
        .map(([k, v]) => `${k}="${v}"`)
        .join(',');
      if (sample.value !== undefined) out.set(labels ? `${family.name}{${labels}}` : family.name, Number(sample.value));
    }
  }
  return out;
}

async function metrics(server: TetherServer): Promise<Map<string, number>> {
  const res = await scrape(server, { authorization: 'Bearer alpha' });
  expect(res.status).toBe(200);
  return values(parsePrometheusTextFormat(await res.text()));
}

describe('GET /metrics', () => {
  let server: TetherServer;
  let proxy: ChaosProxy;
  const logs: string[] = [];

  beforeAll(async () => {
    server = await startServer({
      port: 0,
      token: 'alpha',
      tokens: ['beta'],
      adminToken: 'root',
      outputRetentionBytes: OUTPUT_RETENTION,
      // Output nobody has acknowledged is read up to the window, then the child waits.
      outputWindowBytes: OUTPUT_RETENTION,
      maxSessions: 77,
      logger: (level, msg) => logs.push(`${level} ${msg}`),
    });
    proxy = await ChaosProxy.inFrontOf(server.url);
  });

  afterAll(async () => {
    await proxy.close();
    await server.close();
  });

  it('is behind the token (any accepted one) and refuses browsers, like the WebSocket', async () => {
    const anonymous = await scrape(server);
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toBe('Bearer');
    expect(await anonymous.text()).toBe('missing websocket bearer token');
    expect((await scrape(server, { authorization: 'Bearer wrong' })).status).toBe(401);
    expect((await scrape(server, { authorization: 'Bearer alpha', origin: 'https://evil.example' })).status).toBe(403);
    for (const token of ['alpha', 'beta', 'root']) {
      const res = await scrape(server, { authorization: `Bearer ${token}` });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
      await res.text();
    }
  });

  it('counts sessions, resumes, processes, bytes both ways, evictions, paused time and budgets', async () => {
    const before = await metrics(server);
    expect(before.get('tether_sessions_created_total')).toBe(0);
    expect(before.get('tether_budget_limit{budget="sessions"}')).toBe(77);
    expect(before.get('tether_budget_limit{budget="output_retention_bytes"}')).toBe(OUTPUT_RETENTION);
    // Process-level defaults from prom-client are there too.
    expect(before.get('process_resident_memory_bytes')).toBeGreaterThan(0);

    const a = await ExecClient.connect(proxy.url, { token: 'alpha', clientName: 'metrics-a', recoveryDeadlineMs: 20_000 });
    const b = await ExecClient.connect(server.url, { token: 'beta', clientName: 'metrics-b' });

    // 200 000 bytes out, all read by the client: what retention cannot keep is evicted.
    expect(await drain(a.spawn(['head', '-c', '200000', '/dev/zero']))).toBe(200_000);
    // 1 234 bytes in, echoed back.
    const cat = a.spawn(['cat'], { pipeStdin: true });
    cat.stdin!.end(Buffer.alloc(1234, 7));
    expect(await drain(cat)).toBe(1234);
    // A program that cannot start.
    const missing = a.spawn(['/nonexistent/program']);
    missing.on('error', () => {});
    await missing.closed.catch(() => {});

    // A cut: the client resumes its session.
    const recovered = once(a, 'recovered');
    proxy.cutAll();
    await recovered;

    // Output nobody takes (the client is cut off and cannot come back yet) fills the window,
    // and the child is paused until the client is back.
    // It starts writing only once the test opens its FIFO, after the cut.
    const fifo = join(mkdtempSync(join(tmpdir(), 'tether-metrics-')), 'go');
    execFileSync('mkfifo', [fifo]);
    const producer = a.spawn(['sh', '-c', `cat "$0" >/dev/null; head -c ${4 * OUTPUT_RETENTION} /dev/zero`, fifo]);
    await once(producer, 'spawn');
    proxy.refuse(true);
    proxy.cutAll();
    await expect.poll(async () => (await metrics(server)).get('tether_sessions{state="detached"}')).toBe(1);
    writeFileSync(fifo, 'go');
    await expect.poll(async () => (await metrics(server)).get('tether_output_paused_processes'), { timeout: 10_000 }).toBe(1);
    const detached = await metrics(server);
    expect(detached.get('tether_sessions{state="detached"}')).toBe(1);
    expect(detached.get('tether_sessions{state="attached"}')).toBe(1);
    proxy.refuse(false);
    expect(await drain(producer)).toBe(4 * OUTPUT_RETENTION);
    rmSync(dirname(fifo), { recursive: true });

    await a.close();
    const m = await metrics(server);
    expect(m.get('tether_sessions_created_total')).toBe(2);
    expect(m.get('tether_session_resumes_total')).toBe(2);
    expect(m.get('tether_sessions_ended_total{reason="closed"}')).toBe(1);
    expect(m.get('tether_sessions{state="attached"}')).toBe(1);
    expect(m.get('tether_processes_started_total')).toBe(3);
    expect(m.get('tether_process_start_failures_total')).toBe(1);
    expect(m.get('tether_processes_ended_total')).toBe(3);
    const out = 200_000 + 1234 + 4 * OUTPUT_RETENTION;
    expect(m.get('tether_process_output_bytes_total')).toBe(out);
    expect(m.get('tether_process_input_bytes_total')).toBe(1234);
    // Everything that is no longer retained was evicted (the closed session's processes are
    // gone with what they retained, which is not an eviction).
    expect(m.get('tether_output_evicted_bytes_total')).toBeGreaterThanOrEqual(200_000 - OUTPUT_RETENTION);
    // (With acks, a process whose close the client acknowledged frees all its output at once.)
    expect(m.get('tether_output_evicted_bytes_total')).toBeLessThanOrEqual(out);
    expect(m.get('tether_output_paused_seconds_total')).toBeGreaterThan(0);
    expect(m.get('tether_output_paused_processes')).toBe(0);
    expect(m.get('tether_budget_used{budget="sessions"}')).toBe(1);
    await b.close();
  });

  it('leaves one audit line per process at info: session, argv[0], exit code, duration, bytes — never the environment', async () => {
    const client = await ExecClient.connect(server.url, { token: 'alpha' });
    const proc = client.spawn(['sh', '-c', 'printf "%s" "$AUDIT_SECRET" >/dev/null; printf 12345; exit 3', 'argument-secret'], {
      env: { AUDIT_SECRET: 'env-secret-value', PATH: process.env.PATH! },
    });
    expect(await proc.exited).toBe(3);
    await proc.closed;
    await client.close();
    const short = client.sessionId.slice(0, 8);
    const line = logs.find((l) => l.includes(`session=${short}`) && l.includes('audit process ended'));
    expect(line).toMatch(
      new RegExp(`^info audit process ended: session=${short} process=[\\w-]+ argv0=sh pid=\\d+ exit=3 duration=\\d+\\.\\d{3}s out_bytes=5 in_bytes=0 paused=\\d+\\.\\d{3}s$`),
    );
    // At info (what a server logs by default); debug is asking for more, and gets argv.
    const info = logs.filter((l) => !l.startsWith('debug ')).join('\n');
    expect(logs.join('\n')).not.toContain('env-secret-value');
    expect(info).not.toContain('argument-secret');
    expect(logs.some((l) => /^info audit process start failed: session=\w{8} process=\S+ argv0=\/nonexistent\/program error=/.test(l))).toBe(true);
  });

  it('puts the whole argv in audit lines only when asked (--audit-argv), quoted so no argument forges a line', async () => {
    const lines: string[] = [];
    const verbose = await startServer({ port: 0, auditArgv: true, logger: (level, msg) => lines.push(`${level} ${msg}`) });
    try {
      const client = await ExecClient.connect(verbose.url, { clientName: 'agent\ninfo audit process ended: forged' });
      const proc = client.spawn(['echo', 'one\nfake line', 'two']);
      await proc.closed;
      await client.close();
      const audit = lines.filter((l) => l.startsWith('info audit process ended'));
      expect(audit).toHaveLength(1);
      expect(audit[0]).toContain(' argv0=echo argv=["echo","one\\nfake line","two"] ');
      expect(audit[0]).not.toContain('\n');
      // Nothing a client chooses (its name included) can start a line of its own.
      expect(lines.filter((l) => l.includes('\n'))).toEqual([]);
      expect(lines).toContainEqual(expect.stringMatching(/created for .* \(client "agent\\ninfo audit process ended: forged"\)$/));
    } finally {
      await verbose.close();
    }
  });
});
