/** fs/copy's deadline (issue 22, item 5), with an injected clock: a copy past it stops with a clear error. */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { COPY_BLOCK_BYTES, copy } from '../../../../src/server/local/fs/tree.js';
import { parsePathUri } from '../../../../src/server/fs/uri.js';

const dir = mkdtempSync(join(tmpdir(), 'tether-copy-deadline-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const path = (name: string) => parsePathUri(`file://${join(dir, name)}`);

describe('fs/copy deadline', () => {
  it('stops a copy that runs past its deadline, between blocks', async () => {
    writeFileSync(join(dir, 'src'), Buffer.alloc(3 * COPY_BLOCK_BYTES, 7));
    let t = 0;
    const now = () => (t += 1000) - 1000; // every look at the clock is a second later
    await expect(copy(path('src'), path('dst'), false, { deadlineMs: 2000, now })).rejects.toMatchObject({
      code: -32603,
      message: 'fs/copy did not finish within 2 s and was stopped (a source that keeps growing?)',
    });
  });

  it('copies within the deadline, block by block to the end of file', async () => {
    const data = Buffer.alloc(3 * COPY_BLOCK_BYTES + 5, 9);
    writeFileSync(join(dir, 'whole'), data);
    await copy(path('whole'), path('whole-copy'), false, { deadlineMs: 1000, now: () => 0 });
    expect(readFileSync(join(dir, 'whole-copy'))).toEqual(data);
  });
});
