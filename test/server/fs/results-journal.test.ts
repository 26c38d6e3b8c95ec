/**
 * Idempotency keys through a state dir's journal (issue #27, src/server/fs/results.ts with
 * key-journal.ts): a successor's ResultMemory answers a key the predecessor answered as it
 * was answered (a result or an error) without running it, a key that was running when the
 * predecessor died as "outcome unknown", and a key reused for another request is refused.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCode, RpcError } from '../../../src/protocol/index.js';
import { ResultMemory } from '../../../src/server/fs/results.js';
import { KeyJournal } from '../../../src/server/restart/key-journal.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function journalPath(): string {
  const dir = mkdtempSync(join(tmpdir(), 'results-journal-'));
  dirs.push(dir);
  return join(dir, 's.keys');
}

describe('ResultMemory with a journal', () => {
  it('a successor answers known keys from the journal, and a key that was running as outcome unknown', async () => {
    const path = journalPath();
    const first = new ResultMemory(16, new KeyJournal(path, 16));
    expect(await first.run('ok', 'fs/remove', { path: 'a' }, async () => ({ done: 1 }))).toEqual({ done: 1 });
    await expect(first.run('bad', 'fs/remove', { path: 'b' }, () => Promise.reject(new RpcError(ErrorCode.NotFound, 'No such file')))).rejects.toThrow('No such file');
    // Running when the server died: started, never answered.
    void first.run('running', 'fs/copy', { from: 'x' }, () => new Promise(() => {}));

    const successor = new ResultMemory(16, new KeyJournal(path, 16));
    let ran = 0;
    const again = () => {
      ran++;
      return Promise.resolve({ done: 2 });
    };
    expect(await successor.run('ok', 'fs/remove', { path: 'a' }, again)).toEqual({ done: 1 });
    await expect(successor.run('bad', 'fs/remove', { path: 'b' }, again)).rejects.toMatchObject({ code: ErrorCode.NotFound, message: 'No such file' });
    await expect(successor.run('running', 'fs/copy', { from: 'x' }, again)).rejects.toMatchObject({
      code: ErrorCode.InternalError,
      message: 'outcome unknown (the server restarted during this call)',
    });
    await expect(successor.run('ok', 'fs/remove', { path: 'other' }, again)).rejects.toMatchObject({ code: ErrorCode.InvalidParams });
    expect(ran).toBe(0);
    expect(await successor.run('new', 'fs/remove', { path: 'c' }, again)).toEqual({ done: 2 });
    expect(ran).toBe(1);
  });
});
