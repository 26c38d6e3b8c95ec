/**
 * `tether relay` in front of the real Codex exec-server, its upstream link cut by traffic
 * (seeded byte quotas, never by time): a Codex-dialect client of the relay sees no error and
 * byte-exact output through the cuts; a mutating fs call whose answer is lost at a cut is
 * applied once and answered "outcome unknown" (Codex cannot answer a re-sent one from memory).
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { seededRandom } from '../../src/chaos/random.js';
import { ExecClient } from '../../src/client/index.js';
import { ErrorCode } from '../../src/protocol/index.js';
import { startRelay, type Relay } from '../../src/relay/relay.js';
import { collect } from '../helpers/client-util.js';
import { startCodexServer, type CodexServer } from '../helpers/codex.js';
import { RawClient } from '../helpers/raw-client.js';

let codex: CodexServer;
let proxy: ChaosProxy;
let relay: Relay;
let dir: string;

beforeAll(async () => {
  codex = await startCodexServer();
  proxy = await ChaosProxy.inFrontOf(codex.url);
  relay = await startRelay({ to: proxy.url, upstream: { recoveryDeadlineMs: 30_000 } });
  dir = mkdtempSync(join(tmpdir(), 'tether-relay-codex-'));
});

afterAll(async () => {
  await relay?.close();
  await proxy?.close();
  await codex?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('tether relay in front of Codex, upstream cut by traffic', () => {
  it('offers nothing Codex does not: no extension', () => {
    expect([...relay.backend.extensions]).toEqual([]);
  });

  it('a mutating fs call whose answer is lost is applied once and answered "outcome unknown"', async () => {
    const c = await RawClient.connect(relay.url);
    await c.handshake('relay-codex-fs');
    const file = join(dir, 'once');
    writeFileSync(file, 'x');
    await c.request('fs/getMetadata', { path: pathToFileURL(dir).href });
    const cut = new Promise<string>((resolve) => proxy.once('close', (_r, reason) => resolve(reason)));
    proxy.cutAfterBytes(1, { direction: 'down' });
    const reply = await c.call('fs/remove', { path: pathToFileURL(file).href, recursive: false, force: false });
    expect(await cut).toBe('quota');
    expect(existsSync(file)).toBe(false);
    expect(reply.error?.code).toBe(ErrorCode.InternalError);
    expect(reply.error?.message).toMatch(/outcome unknown/);
    expect(await c.request('fs/getMetadata', { path: pathToFileURL(dir).href })).toMatchObject({ isDirectory: true });
    await c.close();
  });

  it('a Codex-dialect client sees no error through the cuts: output byte-exact, writes once, reads answered', async () => {
    const client = await ExecClient.connect(relay.url, { clientName: 'relay-codex-chaos', extensions: [] });
    const trouble: string[] = [];
    client.on('state', (s) => s.state !== 'connected' && trouble.push(s.state));
    let cuts = 0;
    const onClose = (_r: unknown, reason: string) => reason === 'quota' && cuts++;
    proxy.on('close', onClose);
    const random = seededRandom(2571);
    // Counted upstream: without tether's acks little goes up, so the quota is small (but above
    // what a resume sends: the upgrade, initialize and the catch-up reads).
    proxy.cutEachAfter(() => 1_000 + random() * 1_500, { direction: 'up' });
    try {
      const counter = client.spawn(['perl', '-e', '$|=1; for my $i (1..3000) { print "n$i\\n" } exit 5;']);
      const counted = collect(counter.stdout);
      const echo = client.spawn(['perl', '-e', '$|=1; while (my $l = <STDIN>) { print "echo $l"; exit 0 if $l eq "w60\\n" }'], { pipeStdin: true });
      const echoed = collect(echo.stdout);
      for (let j = 1; j <= 60; j++) {
        await new Promise<void>((resolve, reject) => echo.stdin!.write(`w${j}\n`, (err) => (err ? reject(err) : resolve())));
        expect((await client.fs.stat(dir)).isDirectory()).toBe(true);
      }
      expect(await counter.exited).toBe(5);
      expect(await counted).toBe(Array.from({ length: 3000 }, (_, i) => `n${i + 1}\n`).join(''));
      expect(await echo.exited).toBe(0);
      expect(await echoed).toBe(Array.from({ length: 60 }, (_, j) => `echo w${j + 1}\n`).join(''));
      expect(trouble).toEqual([]);
    } finally {
      proxy.stopCuttingAfterBytes();
      proxy.off('close', onClose);
      await client.close();
    }
    expect(cuts).toBeGreaterThan(3);
  });
});
