/**
 * fs/copy is a bounded loop of the server's own (issue 22, item 5): a source whose size lies
 * (a /sys file says 4096 bytes and holds 18) is copied up to its end of file, and neither
 * pins the thread pool nor keeps SIGTERM from stopping the server. Run against `tether serve`
 * with default options and a bounded heap.
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COPY_BLOCK_BYTES } from '../../../src/server/local/fs/tree.js';
import { RawClient } from '../../helpers/raw-client.js';
import { spawnServe, type ServeProcess } from '../../helpers/serve-process.js';

const LYING = '/sys/class/net/lo/address';
const canLie = (() => {
  try {
    return statSync(LYING).size > readFileSync(LYING).length;
  } catch {
    return false;
  }
})();

let dir: string;
let served: ServeProcess | undefined;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'tether-copy-'));
});
afterAll(async () => {
  await served?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(!canLie)('fs/copy of a file whose size lies', () => {
  it('copies what is there, keeps every thread free for other sessions, and SIGTERM still stops the server', async () => {
    served = await spawnServe(['--listen', 'ws://127.0.0.1:0'], { env: { NODE_OPTIONS: '--max-old-space-size=512' } });
    const hostile = await RawClient.connect(served.url);
    await hostile.handshake('hostile');
    // As many copies as the thread pool has threads (4): with libuv's copyfile each spins one forever.
    const copies = Array.from({ length: 4 }, (_, i) =>
      hostile.call('fs/copy', { sourcePath: `file://${LYING}`, destinationPath: `file://${join(dir, `address-${i}`)}`, recursive: false }),
    );
    const other = await RawClient.connect(served.url);
    await other.handshake('other');
    const read = await other.call('fs/readFile', { path: 'file:///etc/hostname' });
    expect(read.result?.dataBase64).toBe(readFileSync('/etc/hostname').toString('base64'));
    for (const reply of await Promise.all(copies)) expect(reply).toMatchObject({ result: {} });
    const real = readFileSync(LYING);
    expect(real.length).toBeLessThan(COPY_BLOCK_BYTES);
    for (let i = 0; i < 4; i++) expect(readFileSync(join(dir, `address-${i}`))).toEqual(real);
    await Promise.all([hostile.drop(), other.drop()]);
    await served.stop(); // SIGTERM, SIGKILL only if it did not end within 5 s
    expect(served.child.signalCode).not.toBe('SIGKILL');
    expect(served.child.exitCode ?? served.child.signalCode).toBeDefined();
  }, 30_000);
});
