/** A session's binaryOutput handle table (src/server/session/session-handles.ts). Pure. */
import { describe, expect, it } from 'vitest';
import { HandleTable } from '../../../../src/server/session/session-handles.js';

describe('HandleTable', () => {
  it('gives free handles in turn, takes asked-for ones once, frees failed starts and gone processes', () => {
    const t = new HandleTable<string>();
    expect([t.claim(null), t.claim(undefined)]).toEqual([1, 2]);
    expect(t.claim(3)).toBe(3);
    expect(t.claim(3)).toBe('handle 3 is already in use in this session');
    expect(t.claim(null)).toBe(4); // 3 is taken: skipped
    t.bind(1, 'p1');
    t.bind(2, null); // its start failed: free again
    expect([t.get(1), t.get(2), t.get(3)]).toEqual(['p1', undefined, null]);
    t.release(1, 'other');
    expect(t.get(1)).toBe('p1'); // only the process it stands for frees it
    t.release(1, 'p1');
    expect(t.get(1)).toBeUndefined();
    expect(t.cursor).toBe(5);
  });

  it('a successor restores the cursor (a bad one starts from 1) and wraps past the largest u32', () => {
    const t = new HandleTable<string>();
    t.restoreCursor(0xffff_ffff);
    expect([t.claim(null), t.claim(null)]).toEqual([0xffff_ffff, 1]);
    const u = new HandleTable<string>();
    u.restoreCursor(0);
    expect(u.cursor).toBe(1);
    u.restoreCursor(42);
    expect(u.claim(null)).toBe(42);
  });
});
