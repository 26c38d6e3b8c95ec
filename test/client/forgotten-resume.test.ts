/**
 * A resume never asks again for output the client already delivered, for the processes it
 * has already forgotten too. Livelock found with a small per-connection byte quota counting
 * both directions: a process's close was delivered and its final ack was lost with the
 * socket; the client forgot the process, so the resume's `delivered` map left it out and
 * the server replayed all its unacknowledged output — past the quota, so every connection
 * was cut before the client could get anything else done. Loopback only, bounded, no timing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { seededRandom } from '../../src/chaos/random.js';
import { ExecClient } from '../../src/client/index.js';
import { startServer, type TetherServer } from '../../src/server/index.js';

let server: TetherServer;
let proxy: ChaosProxy;

beforeAll(async () => {
  server = await startServer({ port: 0, sessionTtlMs: 60_000 });
  proxy = await ChaosProxy.inFrontOf(server.url);
});

afterAll(async () => {
  await proxy?.close();
  await server?.close();
});

async function readAll(stream: NodeJS.ReadableStream): Promise<number> {
  let bytes = 0;
  for await (const chunk of stream) bytes += (chunk as Buffer).length;
  return bytes;
}

describe('resume after a forgotten process', () => {
  it("does not replay a closed, forgotten process's output: the next call succeeds under a byte quota", async () => {
    const random = seededRandom(2502);
    // Output far past the quota; the quota far past what one small call needs.
    const outputBytes = 1024 * 1024 + Math.floor(random() * 256 * 1024);
    const quota = 96 * 1024 + Math.floor(random() * 32 * 1024);
    const client = await ExecClient.connect(proxy.url, { recoveryDeadlineMs: 5_000 });
    try {
      const proc = client.spawn(['head', '-c', String(outputBytes), '/dev/zero']);
      // Not read yet: past the stream's high-water mark the output is not acknowledged.
      await proc.closed;
      // The next byte up (the final ack, once the output is read) cuts the link: the ack is lost.
      const cut = new Promise<void>((resolve) => proxy.once('close', () => resolve()));
      proxy.cutAfterBytes(1, { direction: 'up' });
      expect(await readAll(proc.stdout)).toBe(outputBytes);
      await cut;
      // From now on every connection may carry `quota` bytes, both directions counted.
      proxy.cutAfterBytes(quota, { direction: 'both', repeat: true });
      const quotaCutsBefore = proxy.stats().quotaCuts;
      // A replay past the quota would cut every connection before the call got anywhere.
      let onCut: (report: unknown, reason: unknown) => void = () => {};
      const livelock = new Promise<never>((_, reject) => {
        let cuts = 0;
        onCut = (_report, reason) => {
          if (reason === 'quota' && ++cuts >= 3) reject(new Error(`${cuts} connections cut by the quota in a row: the resume replays output`));
        };
        proxy.on('close', onCut);
      });
      const echo = client.spawn(['echo', 'after']);
      const [out] = await Promise.race([Promise.all([readAll(echo.stdout), echo.closed]), livelock]).finally(() => proxy.off('close', onCut));
      expect(out).toBe('after\n'.length);
      expect(proxy.stats().quotaCuts - quotaCutsBefore).toBe(0);
    } finally {
      proxy.stopCuttingAfterBytes();
      await client.close();
    }
  }, 30_000);
});
