/**
 * A successor receives a keeper's descriptors off the main thread when the keeper does not
 * answer at once (src/server/local/keeper/receive-fds.ts): the first try blocks only briefly; a keeper that
 * answers only a later connection is still adopted (through a worker thread), one that never
 * answers fails within its deadline with EAGAIN, and meanwhile the main thread keeps running.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { nativeAddon } from '../../../../src/server/native/native.js';
import { receiveFds } from '../../../../src/server/local/keeper/receive-fds.js';
import { socketFd } from '../../../../src/util/node-internals.js';

const servers: Server[] = [];
const dirs: string[] = [];
const held: Socket[] = [];
afterEach(async () => {
  for (const s of held.splice(0)) s.destroy();
  for (const s of servers.splice(0)) await new Promise<void>((resolve) => s.close(() => resolve()));
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A Unix socket whose `answerFrom`-th connection onwards gets three descriptors at once; earlier ones never hear a word. */
async function fakeKeeper(answerFrom: number): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'tether-rf-'));
  dirs.push(dir);
  const path = join(dir, 'k.sock');
  let count = 0;
  const server = createServer((socket) => {
    socket.on('error', () => {});
    held.push(socket);
    if (++count < answerFrom) return;
    const pairs = [0, 1, 2].map(() => nativeAddon().socketPair(false));
    try {
      nativeAddon().sendFds(socketFd(socket)!, pairs.map((p) => p[0]));
    } catch {
      // EPIPE: that connection was given up already (this fake runs on the very thread whose
      // first, blocking try it would answer, so it is accepted only after that try ended)
    }
    for (const [a, b] of pairs) {
      nativeAddon().closeFd(a);
      nativeAddon().closeFd(b);
    }
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  servers.push(server);
  return path;
}

describe('receiveFds', () => {
  it('takes the descriptors of a keeper that answers', async () => {
    const got = await receiveFds(await fakeKeeper(1), 5_000);
    expect(got.fds).toHaveLength(3);
    for (const fd of [got.socket, ...got.fds]) nativeAddon().closeFd(fd);
  });

  it('a keeper that answers only a later connection is still adopted, off the main thread', async () => {
    const path = await fakeKeeper(2);
    let ticks = 0;
    const ticking = setInterval(() => ticks++, 1);
    try {
      const got = await receiveFds(path, 5_000);
      expect(got.fds).toHaveLength(3);
      for (const fd of [got.socket, ...got.fds]) nativeAddon().closeFd(fd);
    } finally {
      clearInterval(ticking);
    }
    expect(ticks).toBeGreaterThan(0); // the loop ran while the worker waited
  });

  it('a keeper that never answers fails with EAGAIN within its deadline', async () => {
    await expect(receiveFds(await fakeKeeper(Infinity), 300)).rejects.toMatchObject({ code: 'EAGAIN' });
  });
});
