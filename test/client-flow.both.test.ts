/**
 * Flow control (opt-in `outputHighWaterMark`): a consumer that stops reading makes the
 * client stop reading the socket, so memory stays bounded and the server slows the
 * process (tether stops reading its pipes); once the consumer reads again every byte
 * arrives, once and in order.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExecClient } from '../src/client/index.js';
import { startTarget, type Target } from './helpers/target.js';
import { waitFor } from './helpers/client-util.js';

let target: Target;

beforeAll(async () => {
  target = await startTarget();
});

afterAll(async () => {
  await target?.stop();
});

describe('ExecClient flow control', () => {
  it('pauses the socket while a consumer is behind and loses nothing', async () => {
    const highWater = 256 * 1024;
    const client = await ExecClient.connect(target.url, { outputHighWaterMark: highWater });
    try {
      const lines = 60_000; // 6 MB of numbered 100-byte lines
      const proc = client.spawn(['perl', '-e', `$|=1; for my $i (1..${lines}) { printf "%099d\\n", $i }`]);
      proc.stdout.pause(); // a consumer that is not reading right now
      const flow: boolean[] = [];
      client.on('flow', (e: { paused: boolean }) => flow.push(e.paused));
      await waitFor<{ paused: boolean }>(client, 'flow', (e) => e.paused);
      // Not a synchronisation: a window in which an unthrottled client would buffer megabytes.
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(proc.stdout.readableLength).toBeLessThan(highWater + 1024 * 1024);
      expect(proc.exitCode).toBeNull();
      let text = '';
      proc.stdout.setEncoding('utf8');
      proc.stdout.on('data', (chunk: string) => (text += chunk));
      proc.stdout.resume(); // after an explicit pause(), a 'data' listener alone does not resume
      expect(await proc.exited).toBe(0);
      await proc.closed;
      const got = text.split('\n').filter(Boolean);
      expect(got.length).toBe(lines);
      expect(got.every((line, i) => Number(line) === i + 1)).toBe(true);
      expect(flow[0]).toBe(true);
      expect(flow).toContain(false);
    } finally {
      await client.close();
    }
  });
});
