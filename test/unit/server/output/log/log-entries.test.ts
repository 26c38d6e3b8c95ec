// An output log's entries (server/log-entries.ts) without a log: searching the kept entries
// by seq, and an output chunk's pieces joined and let go of exactly once.
import { describe, expect, it } from 'vitest';
import { dropOutput, hasOutputAfter, indexAfter, outputBytesBetween, outputParts, sealOutput, type LogEntry, type OutputEntry } from '../../../../../src/server/output/log/log-entries.js';

const out = (seq: number, text: string): OutputEntry => ({ kind: 'output', seq, stream: 'stdout', bytes: text.length, data: Buffer.from(text), parts: null });

describe('log entries', () => {
  const entries: LogEntry[] = [out(1, 'a'), out(2, 'bb'), out(4, 'cccc'), { kind: 'exit', seq: 5, exitCode: 0 }, { kind: 'close', seq: 6 }];

  it('finds the first entry after a seq, from head on', () => {
    expect(indexAfter(entries, 0, 0)).toBe(0);
    expect(indexAfter(entries, 0, 2)).toBe(2);
    expect(indexAfter(entries, 0, 3)).toBe(2);
    expect(indexAfter(entries, 3, 0)).toBe(3);
    expect(indexAfter(entries, 0, 6)).toBe(5);
  });

  it('adds up output bytes in (from, to] and tells whether output follows', () => {
    expect(outputBytesBetween(entries, 0, 0, 6)).toBe(7);
    expect(outputBytesBetween(entries, 0, 1, 2)).toBe(2);
    expect(outputBytesBetween(entries, 1, 0, 4)).toBe(6);
    expect(hasOutputAfter(entries, 0, 2)).toBe(true);
    expect(hasOutputAfter(entries, 0, 4)).toBe(false);
  });

  it('joins pieces once and releases each piece once', () => {
    const released: string[] = [];
    const memory = { extend: () => null, release: (b: Buffer) => void released.push(b.toString()) };
    const entry: OutputEntry = { ...out(1, 'ab'), bytes: 4, parts: [Buffer.from('ab'), Buffer.from('cd')] };
    expect(outputParts(entry).map(String)).toEqual(['ab', 'cd']);
    sealOutput(entry, memory);
    sealOutput(entry, memory);
    expect(entry.data.toString()).toBe('abcd');
    expect(outputParts(entry).map(String)).toEqual(['abcd']);
    expect(released).toEqual(['ab', 'cd']);
    dropOutput(entry, memory);
    expect(released).toEqual(['ab', 'cd', 'abcd']);
    expect(entry.data.length).toBe(0);
  });
});
