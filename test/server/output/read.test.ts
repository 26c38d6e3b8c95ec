/**
 * tether-only: process/read against a model of docs/protocol.md ("process/read"), for arbitrary
 * afterSeq / maxBytes over a closed process with many chunks of varied sizes.
 */
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RawClient } from '../../helpers/raw-client.js';
import { startTetherServer, type TetherTarget } from '../../helpers/tether.js';

let target: TetherTarget;
let c: RawClient;
interface Chunk {
  seq: number;
  stream: string;
  chunk: string;
}
let all: { chunks: Chunk[]; nextSeq: number };

beforeAll(async () => {
  target = await startTetherServer({});
  c = await RawClient.connect(target.url);
  await c.handshake();
  // Separate writes (with tiny pauses) on both streams give many chunks of different sizes.
  const script = 'for i in 1 2 3 4 5 6 7 8 9 10 11 12; do head -c $((i * 37)) /dev/zero | tr "\\0" x; sleep 0.01; echo e$i >&2; sleep 0.01; done; exit 7';
  await c.request('process/start', { processId: 'p', argv: ['/bin/sh', '-c', script], cwd: pathToFileURL(tmpdir()).href, env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, tty: false });
  await c.waitClosed('p');
  all = await c.request('process/read', { processId: 'p', afterSeq: 0 });
});
afterAll(async () => {
  await c?.close();
  await target?.stop();
});

const size = (ch: Chunk) => Buffer.from(ch.chunk, 'base64').length;

describe('process/read model', () => {
  it('has output seqs 1..n, then exit n+1 and close n+2 (nextSeq n+3)', () => {
    const n = all.chunks.length;
    expect(n).toBeGreaterThan(10);
    expect(all.chunks.map((ch) => ch.seq)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    expect(all.nextSeq).toBe(n + 3);
    const events = c.notifications.filter((f) => f.params?.processId === 'p');
    expect(events.at(-2)).toMatchObject({ method: 'process/exited', params: { seq: n + 1, exitCode: 7 } });
    expect(events.at(-1)).toMatchObject({ method: 'process/closed', params: { seq: n + 2 } });
  });

  it('returns the chunks after afterSeq, whole, within maxBytes (at least one), with the documented nextSeq', async () => {
    const n = all.chunks.length;
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: n + 4 }),
        fc.option(fc.integer({ min: 0, max: 2000 }), { nil: null }),
        async (afterSeq, maxBytes) => {
          const r = await c.request('process/read', { processId: 'p', afterSeq, maxBytes });
          const rest = all.chunks.filter((ch) => ch.seq > afterSeq);
          let expected: Chunk[];
          if (maxBytes === null) expected = rest;
          else {
            expected = [];
            let bytes = 0;
            for (const ch of rest) {
              if (expected.length > 0 && bytes + size(ch) > maxBytes) break;
              expected.push(ch);
              bytes += size(ch);
              if (bytes >= maxBytes) break;
            }
          }
          expect(r.chunks).toEqual(expected);
          const nextSeq = maxBytes !== null && expected.length > 0 ? expected.at(-1)!.seq + 1 : all.nextSeq;
          expect(r.nextSeq).toBe(nextSeq);
          expect(r).toMatchObject({ exited: true, exitCode: 7, closed: true, failure: null, sandboxDenied: false });
        },
      ),
      { numRuns: 200 },
    );
  });
});
