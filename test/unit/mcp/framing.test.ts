import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { JsonRpcLineDecoder, LineSplitter, MessageTooLargeError, serializeMessage } from '../../../src/mcp/framing.js';

const msg = (id: number, text = 'x') => ({ jsonrpc: '2.0' as const, id, method: 'tools/call', params: { text } });

function decodeAll(decoder: JsonRpcLineDecoder, chunks: Buffer[]) {
  return chunks.flatMap((c) => decoder.push(c));
}

describe('LineSplitter', () => {
  it('joins a line split across chunks and strips CR before LF', () => {
    const s = new LineSplitter();
    expect(s.push(Buffer.from('{"a":'))).toEqual([]);
    expect(s.push(Buffer.from('1}\r'))).toEqual([]);
    expect(s.push(Buffer.from('\n{"b":2}\n{"c"'))).toEqual(['{"a":1}', '{"b":2}']);
    expect(s.bufferedBytes).toBe(4);
    expect(s.push(Buffer.from(':3}\r\n'))).toEqual(['{"c":3}']);
    expect(s.bufferedBytes).toBe(0);
  });

  it('decodes a multi-byte character split between chunks', () => {
    const s = new LineSplitter();
    const bytes = Buffer.from('"héllo 🌍"\n');
    const cut = bytes.indexOf(0xf0) + 2; // inside the 4-byte emoji
    expect(s.push(bytes.subarray(0, cut))).toEqual([]);
    expect(s.push(bytes.subarray(cut))).toEqual(['"héllo 🌍"']);
  });

  it('refuses an unterminated line past the limit and recovers afterwards', () => {
    const s = new LineSplitter(16);
    expect(() => s.push(Buffer.alloc(17, 0x61))).toThrow(MessageTooLargeError);
    expect(s.bufferedBytes).toBe(0);
    expect(s.push(Buffer.from('ok\n'))).toEqual(['ok']);
    s.push(Buffer.alloc(10, 0x61));
    expect(() => s.push(Buffer.alloc(10, 0x61))).toThrow(/maximum size of 16 bytes/);
  });

  it('any chunking of a stream yields the same lines (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.string({ unit: 'grapheme', maxLength: 40 }).map((l) => l.replace(/[\r\n]/g, '')), { maxLength: 12 }),
        fc.array(fc.nat(), { maxLength: 20 }),
        fc.boolean(),
        (lines, cutsRaw, crlf) => {
          const bytes = Buffer.from(lines.map((l) => l + (crlf ? '\r\n' : '\n')).join(''));
          const cuts = [...new Set(cutsRaw.map((c) => (bytes.length ? c % bytes.length : 0)))].sort((a, b) => a - b);
          const s = new LineSplitter();
          const out: string[] = [];
          let prev = 0;
          for (const c of [...cuts, bytes.length]) {
            out.push(...s.push(bytes.subarray(prev, c)));
            prev = c;
          }
          expect(out).toEqual(lines);
          expect(s.bufferedBytes).toBe(0);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('JsonRpcLineDecoder', () => {
  it('round-trips the SDK serialisation, one byte at a time', () => {
    const d = new JsonRpcLineDecoder();
    const wire = Buffer.from([msg(1), msg(2, 'ünïcødé\nwith newline')].map(serializeMessage).join(''));
    const chunks = [...wire].map((b) => Buffer.from([b]));
    const out = decodeAll(d, chunks);
    expect(out).toEqual([
      { ok: true, message: msg(1) },
      { ok: true, message: msg(2, 'ünïcødé\nwith newline') },
    ]);
  });

  it('handles a large message arriving in many chunks', () => {
    const d = new JsonRpcLineDecoder();
    const big = msg(7, 'z'.repeat(4 * 1024 * 1024));
    const wire = Buffer.from(serializeMessage(big));
    const chunks: Buffer[] = [];
    for (let i = 0; i < wire.length; i += 4096) chunks.push(wire.subarray(i, i + 4096));
    const out = decodeAll(d, chunks);
    expect(out).toHaveLength(1);
    expect(out[0]).toEqual({ ok: true, message: big });
  });

  it('reports a bad line without losing the messages around it, and skips blank lines', () => {
    const d = new JsonRpcLineDecoder();
    const out = d.push(Buffer.from(`${JSON.stringify(msg(1))}\n\r\nnot json\n{"hello":1}\n${JSON.stringify(msg(2))}\n`));
    expect(out.map((r) => r.ok)).toEqual([true, false, false, true]);
    const bad = out.filter((r) => !r.ok) as { ok: false; error: Error }[];
    expect(bad[0]!.error.message).toMatch(/not JSON: not json/);
    expect(bad[1]!.error.message).toMatch(/not a JSON-RPC message/);
  });
});
