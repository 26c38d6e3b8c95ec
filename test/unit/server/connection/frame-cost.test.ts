/** The pre-parse estimate of a JSON frame's heap (src/server/connection/frame-cost.ts): values counted outside strings, the id picked up. */
import { describe, expect, it } from 'vitest';
import { BYTES_PER_JSON_VALUE, frameCost } from '../../../../src/server/connection/frame-cost.js';

const cost = (text: string) => frameCost(Buffer.from(text));

describe('frameCost', () => {
  it('counts { [ , : outside strings only, and charges each on top of the bytes', () => {
    const text = '{"id":1,"method":"m","params":{"a":[1,2,{}],"s":"{[,:]}"}}';
    const c = cost(text);
    // { : , : , : { : [ , , { , :  (the string "{[,:]}" does not count)
    expect(c.structural).toBe(14);
    expect(c.cost).toBe(Buffer.byteLength(text) + 14 * BYTES_PER_JSON_VALUE);
  });

  it('skips escaped quotes and backslashes inside strings', () => {
    expect(cost('{"a":"x\\",[,{","b":"\\\\"}').structural).toBe(4);
    expect(cost('{"a":"\\\\\\"{,"}').structural).toBe(2);
  });

  it('estimates at least what V8 really holds for a frame of tiny values', () => {
    const text = `{"x":[${'{},'.repeat(99_999)}{}]}`;
    // 100 000 empty objects: V8 holds about 67 bytes each.
    expect(cost(text).cost).toBeGreaterThan(100_000 * 67);
  });

  it('charges a big string its bytes alone', () => {
    const text = `{"id":3,"method":"process/write","params":{"processId":"p","chunk":"${'QUJD'.repeat(250_000)}","writeId":"w"}}`;
    expect(cost(text).structural).toBe(12);
  });

  it('picks up the top-level id: an integer or a string, not a nested one', () => {
    expect(cost('{"method":"m","id":42,"params":{}}').id).toBe(42);
    expect(cost('{"id" : "a\\"b","method":"m"}').id).toBe('a"b');
    expect(cost('{"params":{"id":5},"method":"m"}').id).toBeNull();
    expect(cost('{"id":null,"method":"m"}').id).toBeNull();
    expect(cost('{"id":1.5,"method":"m"}').id).toBeNull();
    expect(cost('{"id":"unterminated').id).toBeNull();
  });
});
