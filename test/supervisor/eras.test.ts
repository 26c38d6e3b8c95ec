/**
 * The supervisor and both MCP eras (issue #26), against real stdio servers: a
 * 2026-07-28-only server (SDK v2 `serveStdio`, legacy rejected), a dual one, server-everything
 * (2025, SDK v1), and one that refuses every version. The era that connects is kept and
 * tried first next time; a server refusing every version is a permanent failure.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ServerSupervisor, ServerUnavailableError } from '../../src/supervisor/index.js';
import { everything, node, repoRoot, text } from '../helpers/mcp-peers.js';
import { modernHttpBackend } from '../helpers/modern-http-backend.js';

const supervisors: ServerSupervisor[] = [];
const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(supervisors.splice(0).map((s) => s.stop()));
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const fixture = (name: string, ...args: string[]) => ({ command: node, args: [path.join(repoRoot, 'test/fixtures', name), ...args] });
const fast = { healthIntervalMs: 0, backoff: { initialMs: 50, maxMs: 200 } };

function supervise(name: string, spec: { command: string; args: string[] }, options = {}) {
  const sup = new ServerSupervisor({ name, kind: 'stdio', ...spec }, { ...fast, ...options });
  supervisors.push(sup);
  return sup;
}

describe('supervisor, both MCP eras', () => {
  it.each([
    ['modern', '2026-07-28', fixture('mcp-v2-server.mjs', 'modern'), 'Echo (modern): hi'],
    ['dual', '2025', fixture('mcp-v2-server.mjs', 'dual'), 'Echo (legacy): hi'],
    ['everything', '2025', everything, 'Echo: hi'],
  ] as const)('%s server → connected in era %s; lists, reads, gets a prompt, calls', async (name, era, spec, echoed) => {
    const sup = supervise(name, spec);
    await sup.start();
    expect(sup.status).toBe('connected');
    expect(sup.detail().protocolEra).toBe(era);
    expect(sup.tools.map((t) => t.name)).toContain('echo');
    expect(text(await sup.callTool('echo', { message: 'hi' }))).toBe(echoed);
    if (name !== 'everything') {
      expect(sup.resources.map((r) => r.uri)).toContain('v2://hello');
      const read = (await sup.request('resources/read', { uri: 'v2://hello' })) as { contents: { text: string }[] };
      expect(read.contents[0]!.text).toMatch(/^hello from /);
      const prompt = (await sup.request('prompts/get', { name: 'greet', arguments: { name: 'Ada' } })) as { messages: { content: { text: string } }[] };
      expect(prompt.messages[0]!.content.text).toBe('Hello, Ada');
    }
  });

  it("a 2026-07-28 server's progress reports sent just before its result all reach the call (the SDK v2 client would drop them)", async () => {
    const sup = supervise('modern', fixture('mcp-v2-server.mjs', 'modern'));
    await sup.start();
    for (let i = 0; i < 10; i++) {
      const progress: number[] = [];
      expect(text(await sup.request('tools/call', { name: 'steps', arguments: {} }, { onprogress: (p) => progress.push(p.progress) }))).toBe('stepped');
      expect(progress).toEqual([1, 2, 3]);
    }
  });

  it('a 2026-07-28 server killed is restarted in the era it had (kept), and its health probe is a real request, not ping', async () => {
    const sup = supervise('modern', fixture('mcp-v2-server.mjs', 'modern'), { healthIntervalMs: 100, healthJitter: 0 });
    await sup.start();
    const firstCheck = sup.detail().lastHealthCheckAt;
    await expect.poll(() => sup.detail().lastHealthCheckAt !== firstCheck, { timeout: 5000 }).toBe(true);
    expect(sup.detail()).toMatchObject({ health: 'healthy', consecutiveHealthFailures: 0, lastHealthError: null });
    const reconnected = once(sup, 'server_reconnected');
    process.kill(sup.pid!, 'SIGKILL');
    await reconnected;
    expect(sup.detail().protocolEra).toBe('2026-07-28');
    expect(text(await sup.callTool('echo', { message: 'again' }))).toBe('Echo (modern): again');
  });

  it('a server refusing every version → failed with the reason of both eras, not retried, not even by a call', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'tether-eras-'));
    dirs.push(dir);
    const starts = path.join(dir, 'starts');
    const sup = supervise('refuser', fixture('refuse-all-versions.mjs', starts));
    const failed = once(sup, 'server_failed');
    await sup.start();
    await failed;
    expect(sup.summary()).toMatchObject({
      status: 'failed',
      health: 'unknown',
      nextRetryMs: null,
      reason: expect.stringMatching(/refuses the MCP protocol versions .*2025-11-25 \(initialize\): .*Unsupported protocol version.*2026-07-28 \(server\/discover\): /),
    });
    const spawned = readFileSync(starts, 'utf8').split('\n').filter(Boolean).length;
    expect(spawned).toBe(2); // one per era, once
    expect(await sup.callTool('echo', {}).catch((e: unknown) => e)).toBeInstanceOf(ServerUnavailableError);
    expect(readFileSync(starts, 'utf8').split('\n').filter(Boolean).length).toBe(spawned);
  });

  it('a 2026-07-28-only HTTP server → connected in that era (SDK v2 HTTP transport), usable', async () => {
    const backend = await modernHttpBackend();
    try {
      const sup = new ServerSupervisor({ name: 'mhttp', kind: 'http', url: backend.url }, fast);
      supervisors.push(sup);
      await sup.start();
      expect(sup.summary()).toMatchObject({ status: 'connected', lastError: null });
      expect(sup.detail().protocolEra).toBe('2026-07-28');
      expect(text(await sup.callTool('echo', { message: 'web' }))).toBe('Echo (http modern): web');
      await sup.stop();
    } finally {
      await backend.close();
    }
  });
});
