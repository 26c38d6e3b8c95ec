/** The stdio framing (server/stdio-lines.ts): pure, any chunking, bounded, resynchronised after an oversized line. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { StdioLines, type StdioLine } from '../../../../src/server/edge/stdio-lines.js';

const text = (items: StdioLine[]) => items.map((i) => (i.kind === 'line' ? i.line.toString() : `<too-large ${i.bytes}>`));

describe('StdioLines', () => {
  it('splits lines, drops a trailing \\r, ignores empty lines', () => {
    const lines = new StdioLines(100);
    expect(text(lines.push(Buffer.from('{"a":1}\r\n\n\r\n{"b"')))).toEqual(['{"a":1}']);
    expect(lines.bufferedBytes).toBe(4);
    expect(text(lines.push(Buffer.from(':2}\n')))).toEqual(['{"b":2}']);
    expect(lines.bufferedBytes).toBe(0);
  });

  it('skips a line past the limit up to its newline, reports it once, and goes on in step', () => {
    const lines = new StdioLines(8);
    expect(text(lines.push(Buffer.from('123456')))).toEqual([]);
    expect(text(lines.push(Buffer.from('7890')))).toEqual([]);
    expect(lines.bufferedBytes).toBe(0); // nothing of it is kept
    expect(text(lines.push(Buffer.from('ab\nok\n')))).toEqual(['<too-large 12>', 'ok']);
    expect(text(lines.push(Buffer.from('123456789\n12345678\n')))).toEqual(['<too-large 9>', '12345678']);
  });

  it('gives the same lines whatever the chunking, never holding more than the limit', () => {
    fc.assert(
      fc.property(fc.array(fc.stringMatching(/^[a-z{}":]{0,12}$/), { maxLength: 20 }), fc.array(fc.nat(30), { maxLength: 10 }), (messages, cuts) => {
        const whole = Buffer.from(messages.map((m) => `${m}\n`).join(''));
        const lines = new StdioLines(10);
        const got: StdioLine[] = [];
        let at = 0;
        for (const cut of [...cuts, whole.length]) {
          const end = Math.min(whole.length, at + cut);
          got.push(...lines.push(whole.subarray(at, end)));
          expect(lines.bufferedBytes).toBeLessThanOrEqual(10);
          at = end;
        }
        got.push(...lines.push(whole.subarray(at)));
        const expected = messages.filter((m) => m.length > 0).map((m) => (m.length > 10 ? `<too-large ${m.length}>` : m));
        expect(text(got)).toEqual(expected);
      }),
    );
  });
});
