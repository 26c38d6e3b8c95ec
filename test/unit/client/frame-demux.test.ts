/**
 * The client's frame demultiplexer (src/client/frame-demux.ts) on its own: tether output
 * messages are taken off the byte stream whole and exact, however the stream is cut into
 * reads; every other frame reaches `ws` byte for byte, in order; anything unexpected turns
 * it into a plain pipe. Seeded property runs, bounded in count.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FrameDemux, type DemuxTarget } from '../../../src/client/frame-demux.js';
import { outputFrameHeader } from '../../../src/protocol/binary-frames.js';
import { ByteArena } from '../../../src/util/byte-arena.js';

/** A server frame (unmasked). */
function frame(opcode: number, payload: Buffer, fin = true): Buffer {
  const first = (fin ? 0x80 : 0) | opcode;
  let head: Buffer;
  if (payload.length < 126) head = Buffer.from([first, payload.length]);
  else if (payload.length < 0x10000) {
    head = Buffer.from([first, 126, 0, 0]);
    head.writeUInt16BE(payload.length, 2);
  } else {
    head = Buffer.alloc(10);
    head[0] = first;
    head[1] = 127;
    head.writeBigUInt64BE(BigInt(payload.length), 2);
  }
  return Buffer.concat([head, payload]);
}

interface Collected {
  passed: Buffer[];
  outputs: { seq: number; data: Buffer }[];
}

function collector(arena: ByteArena | null): { target: DemuxTarget; got: Collected } {
  const got: Collected = { passed: [], outputs: [] };
  return {
    got,
    target: {
      passOn: (bytes) => got.passed.push(bytes),
      memoryFor: () => arena,
      output: (header, pieces, memory) => {
        got.outputs.push({ seq: header.readUInt32BE(12), data: Buffer.concat(pieces) });
        if (memory) for (const p of pieces) memory.release(p);
      },
    },
  };
}

/** Feeds `stream` in reads cut at `cuts`, each read in a reused buffer (as `onread` does). */
function feed(demux: FrameDemux, stream: Buffer, cuts: number[]): void {
  const shared = Buffer.alloc(stream.length);
  const points = [...new Set(cuts.map((c) => c % (stream.length + 1)))].sort((a, b) => a - b);
  let from = 0;
  for (const to of [...points, stream.length]) {
    if (to <= from) continue;
    const view = shared.subarray(0, to - from);
    stream.copy(view, 0, from, to);
    demux.push(view);
    view.fill(0xee); // the next read reuses the buffer: nothing may still point into it
    from = to;
  }
}

const payload = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 31 + seed) % 256));

describe('FrameDemux', () => {
  it('takes output messages whole (fragmented or not) and passes everything else on, in order, through any cuts (property)', () => {
    const item = fc.oneof(
      fc.record({ kind: fc.constant('output' as const), size: fc.integer({ min: 1, max: 70_000 }), fragments: fc.integer({ min: 1, max: 4 }) }),
      fc.record({ kind: fc.constant('text' as const), size: fc.integer({ min: 0, max: 300 }) }),
      fc.record({ kind: fc.constant('ping' as const), size: fc.integer({ min: 0, max: 125 }) }),
      fc.record({ kind: fc.constant('jsonBinary' as const), size: fc.integer({ min: 1, max: 200 }) }),
    );
    fc.assert(
      fc.property(fc.array(item, { minLength: 1, maxLength: 25 }), fc.array(fc.nat(), { maxLength: 40 }), fc.boolean(), (items, cuts, useArena) => {
        const wire: Buffer[] = [];
        const theirs: Buffer[] = [];
        const expected: { seq: number; data: Buffer }[] = [];
        items.forEach((it, n) => {
          if (it.kind === 'output') {
            const data = payload(it.size, n);
            const message = Buffer.concat([outputFrameHeader(7, n + 1, 'stdout'), data]);
            const step = Math.ceil(message.length / it.fragments);
            for (let at = 0, k = 0; at < message.length; at += step, k++) {
              wire.push(frame(k === 0 ? 0x2 : 0x0, message.subarray(at, at + step), at + step >= message.length));
              // A ping between two frames of the message goes to ws.
              if (at + step < message.length && n % 2 === 0) {
                const ping = frame(0x9, Buffer.from('p'));
                wire.push(ping);
                theirs.push(ping);
              }
            }
            expected.push({ seq: n + 1, data });
          } else {
            const f =
              it.kind === 'text'
                ? frame(0x1, Buffer.from('x'.repeat(it.size)))
                : it.kind === 'ping'
                  ? frame(0x9, payload(it.size, n))
                  : frame(0x2, Buffer.from(`{"id":${'1'.repeat(it.size)}}`));
            wire.push(f);
            theirs.push(f);
          }
        });
        const arena = useArena ? new ByteArena({ blockBytes: 64 * 1024, minBlockCopyBytes: 512 }) : null;
        const { target, got } = collector(arena);
        const demux = new FrameDemux(target, 1 << 20);
        feed(demux, Buffer.concat(wire), cuts);
        expect(Buffer.concat(got.passed).equals(Buffer.concat(theirs))).toBe(true);
        expect(got.outputs.map((o) => o.seq)).toEqual(expected.map((e) => e.seq));
        got.outputs.forEach((o, k) => expect(o.data.equals(expected[k]!.data)).toBe(true));
      }),
      { seed: 20261122, numRuns: 150 },
    );
  });

  it('hands anything unexpected to ws as it is, from there on', () => {
    for (const bad of [
      Buffer.from([0x82, 0x81, 1, 2, 3, 4, 9]), // masked
      Buffer.from([0xc2, 0x01, 0x01]), // a reserved bit
      Buffer.from([0x80, 0x01, 0x01]), // a continuation of nothing
    ]) {
      const { target, got } = collector(null);
      const demux = new FrameDemux(target, 1 << 20);
      const after = frame(0x1, Buffer.from('{}'));
      feed(demux, Buffer.concat([bad, after]), [1]);
      expect(Buffer.concat(got.passed).equals(Buffer.concat([bad, after]))).toBe(true);
      expect(got.outputs).toEqual([]);
    }
  });

  it('gives up an output message larger than the limit (its blocks released) and hands the rest to ws', () => {
    const arena = new ByteArena({ blockBytes: 64 * 1024, minBlockCopyBytes: 512 });
    const { target, got } = collector(arena);
    const demux = new FrameDemux(target, 1000);
    const message = Buffer.concat([outputFrameHeader(1, 1, 'stdout'), payload(2000, 1)]);
    const wire = Buffer.concat([frame(0x2, message.subarray(0, 900), false), frame(0x0, message.subarray(900))]);
    feed(demux, wire, [600, 950]);
    expect(got.outputs).toEqual([]);
    expect(got.passed.length).toBeGreaterThan(0); // ws gets the stray continuation and fails the connection
    expect(arena.heldBytes).toBeLessThanOrEqual(64 * 1024);
  });
});
