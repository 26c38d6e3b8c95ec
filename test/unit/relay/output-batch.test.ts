/**
 * The relay's output batching (src/relay/output-batch.ts): small output messages of one
 * synchronous run become one chunk, in order, passed on at the next tick at the latest, or at
 * once by `flush` (before an end, an exit or a close). Pure.
 */
import { describe, expect, it } from 'vitest';
import { BATCH_BYTES, OutputBatch } from '../../../src/relay/output-batch.js';

type Got = Array<[string, string]>;

function batch(): { b: OutputBatch; got: Got } {
  const got: Got = [];
  return { got, b: new OutputBatch((stream, data) => got.push([stream, data.toString()])) };
}

const tick = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('OutputBatch', () => {
  it('joins the small messages of one synchronous run into one chunk, passed on by the next tick', async () => {
    const { b, got } = batch();
    b.add('stdout', Buffer.from('a'));
    b.add('stdout', Buffer.from('b'));
    b.add('stdout', Buffer.from('c'));
    expect(got).toEqual([]);
    await tick();
    expect(got).toEqual([['stdout', 'abc']]);
  });

  it('keeps the order across streams: a batch is passed on before the other stream\'s output', async () => {
    const { b, got } = batch();
    b.add('stdout', Buffer.from('1'));
    b.add('stderr', Buffer.from('2'));
    b.add('stderr', Buffer.from('3'));
    b.add('stdout', Buffer.from('4'));
    await tick();
    expect(got).toEqual([
      ['stdout', '1'],
      ['stderr', '23'],
      ['stdout', '4'],
    ]);
  });

  it('passes a large message on at once, after what was held, and never joins past the limit', () => {
    const { b, got } = batch();
    const big = Buffer.alloc(BATCH_BYTES, 'x');
    b.add('stdout', Buffer.from('s'));
    b.add('stdout', big);
    expect(got.map(([s, d]) => [s, d.length])).toEqual([
      ['stdout', 1],
      ['stdout', BATCH_BYTES],
    ]);
    const half = Buffer.alloc(BATCH_BYTES / 2 + 1, 'y');
    b.add('stdout', half);
    b.add('stdout', half); // would not fit: the first half goes on alone
    expect(got.map(([s, d]) => [s, d.length])).toEqual([
      ['stdout', 1],
      ['stdout', BATCH_BYTES],
      ['stdout', BATCH_BYTES / 2 + 1],
    ]);
  });

  it('keeps no reference to what it was given: the caller may reuse its memory at once', async () => {
    const { b, got } = batch();
    const reused = Buffer.from('abc');
    b.add('stdout', reused);
    reused.fill('z');
    b.add('stdout', reused);
    await tick();
    expect(got).toEqual([['stdout', 'abczzz']]);
  });

  it('flush passes on what is held at once (the relay calls it before an end, an exit or a close), and the tick then has nothing left', async () => {
    const { b, got } = batch();
    b.add('stdout', Buffer.from('last'));
    b.flush();
    got.push(['exit', '']);
    await tick();
    expect(got).toEqual([
      ['stdout', 'last'],
      ['exit', ''],
    ]);
  });
});
