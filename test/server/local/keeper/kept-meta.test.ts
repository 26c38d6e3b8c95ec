/**
 * A kept keeper's meta as a successor reads it back from the keeper's dump (kept-server.ts
 * `parseMeta`): untrusted input like the rest of the state dir. What is not ours gives null
 * (the keeper is then dismissed); a handle must fit the u32 that binary output frames carry.
 */
import { describe, expect, it } from 'vitest';
import { parseMeta } from '../../../../src/server/restart/kept-server.js';
import { MAX_LISTED_ARGV_CHARS } from '../../../../src/server/session/listed-argv.js';

const meta = (over: Record<string, unknown> = {}) => Buffer.from(JSON.stringify({ v: 1, session: 's', process: 'p', handle: 3, argv: ['sh'], tty: false, stdin: true, ...over }));

describe('parseMeta', () => {
  it('reads back what keepOptions writes', () => {
    expect(parseMeta(meta())).toEqual({ v: 1, session: 's', process: 'p', handle: 3, argv: ['sh'], tty: false, stdin: true });
    expect(parseMeta(meta({ handle: undefined }))?.handle).toBe(0);
  });

  it('refuses what is not a meta of ours, and a handle that is no u32', () => {
    for (const bad of ['null', '[]', '"x"', '{', JSON.stringify({ v: 2, session: 's', process: 'p' })]) expect(parseMeta(Buffer.from(bad))).toBeNull();
    for (const handle of [-1, 1.5, 2 ** 32, 2 ** 60, '3']) expect(parseMeta(meta({ handle })), String(handle)).toBeNull();
    expect(parseMeta(meta({ handle: 2 ** 32 - 1 }))?.handle).toBe(2 ** 32 - 1);
  });

  it('cuts an argv as it is listed', () => {
    const argv = parseMeta(meta({ argv: ['x'.repeat(3 * MAX_LISTED_ARGV_CHARS)] }))!.argv;
    expect(argv.join('').length).toBeLessThanOrEqual(MAX_LISTED_ARGV_CHARS);
  });
});
