/**
 * Flow control. In the Codex dialect (opt-in `outputHighWaterMark`): a consumer that stops
 * reading makes the client stop reading the socket, so memory stays bounded and the server
 * slows the process (tether stops reading its pipes). With tether's `acks`: the consumer's
 * process alone is held back (its output is not acknowledged), the socket keeps flowing.
 * Either way, once the consumer reads again every byte arrives, once and in order.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExecClient } from '../../src/client/index.js';
import { isCodex, startTarget, type Target } from '../helpers/target.js';
import type { TetherTarget } from '../helpers/tether.js';
import { waitFor } from '../helpers/client-util.js';
import { serverInternals } from '../../src/server/server.js';

async function until(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function collectBytes(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of stream) parts.push(chunk as Buffer);
  return Buffer.concat(parts);
}

let target: Target;

beforeAll(async () => {
  target = await startTarget();
});

afterAll(async () => {
  await target?.stop();
});

describe('ExecClient flow control', () => {
  it('Codex dialect: pauses the socket while a consumer is behind and loses nothing', async () => {
    const highWater = 256 * 1024;
    const client = await ExecClient.connect(target.url, { outputHighWaterMark: highWater, extensions: [] });
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

  it.skipIf(isCodex)('with acks: a consumer that is behind holds back its own process, not the socket, and loses nothing', async () => {
    const client = await ExecClient.connect(target.url, { outputHighWaterMark: 256 * 1024 });
    try {
      expect(client.extensions.has('acks')).toBe(true);
      const lines = 200_000; // 20 MB of numbered 100-byte lines: more than the 8 MiB window
      const proc = client.spawn(['perl', '-e', `$|=1; for my $i (1..${lines}) { printf "%099d\\n", $i }`]);
      proc.stdout.pause();
      const flow: boolean[] = [];
      client.on('flow', (e: { paused: boolean }) => flow.push(e.paused));
      await new Promise((resolve) => proc.once('spawn', resolve));
      const server = (target as TetherTarget).server;
      const remote = [...serverInternals(server).sessions.get(client.sessionId)!.processes.values()][0]!;
      // The server stops reading it once a window of output is unacknowledged…
      await until(() => remote.isPaused, 'the server held the process back');
      expect(remote.unacknowledged).toBeGreaterThanOrEqual(8 * 1024 * 1024);
      // What the stalled consumer makes the server hold: the window (and one read past it), not the 20 MB.
      expect(remote.unacknowledged).toBeLessThanOrEqual(9 * 1024 * 1024);
      // …while the session answers at once, and another process streams through.
      expect(await client.request('environment/status', {})).toEqual({ status: 'ready' });
      const other = client.spawn(['head', '-c', String(4 * 1024 * 1024), '/dev/zero']);
      expect((await collectBytes(other.stdout)).length).toBe(4 * 1024 * 1024);
      expect(remote.isPaused).toBe(true);
      expect(remote.unacknowledged).toBeLessThanOrEqual(9 * 1024 * 1024);
      let text = '';
      proc.stdout.setEncoding('utf8');
      proc.stdout.on('data', (chunk: string) => (text += chunk));
      proc.stdout.resume();
      expect(await proc.exited).toBe(0);
      await proc.closed;
      const got = text.split('\n').filter(Boolean);
      expect(got.length).toBe(lines);
      expect(got.every((line, i) => Number(line) === i + 1)).toBe(true);
      expect(flow).toEqual([]); // the socket was never paused
    } finally {
      await client.close();
    }
  });
});
