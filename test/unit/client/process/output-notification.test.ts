/**
 * The cheap read of a `process/output` text frame (src/client/process/output-notification.ts): when it
 * answers, it is exactly what parsing the whole frame gives; anything it cannot be sure of is
 * left to the full parse (null). Pure.
 */
import { describe, expect, it } from 'vitest';
import { MIN_FAST_BYTES, peekOutputNotification } from '../../../../src/client/process/output-notification.js';

const chunk = Buffer.alloc(MIN_FAST_BYTES, 'x').toString('base64');
const frame = (value: unknown) => Buffer.from(JSON.stringify(value));
const output = (params: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({ method: 'process/output', params, ...extra });

function same(buf: Buffer): void {
  const got = peekOutputNotification(buf);
  expect(got).not.toBeNull();
  const whole = JSON.parse(buf.toString('utf8'));
  expect(got).toEqual({ method: whole.method, params: whole.params });
}

describe('peekOutputNotification', () => {
  it('reads Codex\'s and tether\'s process/output frames as the whole parse does', () => {
    same(frame(output({ processId: 'p1', seq: 7, stream: 'stdout', chunk })));
    same(frame(output({ processId: 'p1', seq: 8, stream: 'stderr', chunk }, { jsonrpc: '2.0' })));
    same(frame({ params: { chunk, seq: 1, processId: 'é-ü', stream: 'pty' }, method: 'process/output' }));
  });

  it('leaves to the full parse whatever it cannot be sure of', () => {
    const cases = [
      frame(output({ processId: 'p1', seq: 1, stream: 'stdout', chunk: 'c2hvcnQ=' })), // small
      frame(output({ processId: 'a"b', seq: 1, stream: 'stdout', chunk })), // an escape somewhere
      frame(output({ processId: 'p', seq: 1, stream: 'stdout', chunk: chunk + '\\/' })), // an escape in the chunk
      frame({ method: 'process/output', chunk, params: { processId: 'p', seq: 1, stream: 'stdout', chunk: '' } }), // two chunk keys
      frame(output({ processId: 'p', seq: 1, stream: 'stdout', other: { chunk }, chunk: '' })), // the one found is not params.chunk
      frame(output({ processId: 'p', seq: 1, stream: 'stdout', other: { chunk } })), // no params.chunk
      frame({ method: 'process/exited', params: { processId: 'p', seq: 1, chunk } }), // another method
      frame({ id: 3, method: 'process/output', params: { processId: 'p', seq: 1, stream: 'stdout', chunk } }), // a request
      frame({ jsonrpc: '1.0', method: 'process/output', params: { processId: 'p', seq: 1, stream: 'stdout', chunk } }),
      frame({ result: { chunk } }),
      Buffer.from(`{"method":"process/output","params":{"chunk":"${chunk}"`), // truncated
      Buffer.from(`[{"method":"process/output","params":{"chunk":"${chunk}"}}]`), // a batch
      Buffer.from(`{"method":"process/output","params":{"chunk":"${chunk}`), // no closing quote
    ];
    for (const buf of cases) expect(peekOutputNotification(buf)).toBeNull();
  });

  it('agrees with the whole parse on seeded random output frames, or declines', () => {
    let seed = 25;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) >>> 0) % n);
    const alphabet = 'ab"\\/chunk:{}é ';
    for (let i = 0; i < 500; i++) {
      let id = '';
      for (let j = rand(12); j > 0; j--) id += alphabet[rand(alphabet.length)];
      const params: Record<string, unknown> = { processId: id, seq: rand(1000), stream: 'stdout', chunk: Buffer.alloc(MIN_FAST_BYTES + rand(64), rand(256)).toString('base64') };
      if (rand(4) === 0) params[id] = rand(2) ? { chunk: id } : id;
      const buf = frame(output(params, rand(2) ? { jsonrpc: '2.0' } : {}));
      const got = peekOutputNotification(buf);
      if (got) same(buf);
    }
  });
});
