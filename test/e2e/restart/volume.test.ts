/**
 * Volume across a crash (issue #27): `tether exec` of a producer writing ~19 MB as fast as it
 * can; the server is killed -9 early, so while no server runs the keeper fills its retained
 * buffer up to its cap and then stops reading (the command blocks in write(2)); a successor
 * adopts it and the client gets every byte once, in order, and the exit code. (Checked by
 * hand once: with no server, seq had written 11.6 MB and sat in write(2) — the cap is hit.)
 */
import { createHash, randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { spawnTether } from '../../helpers/cli.js';
import { startRestartableServer, type RestartableServer } from '../../helpers/restart.js';

const TEST_TIMEOUT_MS = 60_000;
const COUNT = 2_500_000;

let restartables: RestartableServer[] = [];
afterEach(async () => {
  for (const r of restartables.splice(0)) await r.dispose();
});

function expectedDigest(): { bytes: number; sha256: string } {
  const hash = createHash('sha256');
  let bytes = 0;
  for (let start = 1; start <= COUNT; start += 100_000) {
    let block = '';
    for (let i = start; i < Math.min(start + 100_000, COUNT + 1); i++) block += `${i}\n`;
    hash.update(block);
    bytes += block.length;
  }
  return { bytes, sha256: hash.digest('hex') };
}

describe('a fast producer across kill -9 of its server', () => {
  it(
    'the keeper holds what the command wrote up to its cap; the client gets every byte once and exit 7',
    async () => {
      const server = await startRestartableServer('self');
      restartables.push(server);
      const marker = `volume-${randomUUID()}`;
      const cli = spawnTether(['exec', '--url', server.url, '--recovery-deadline', '120s', 'sh', '-c', `seq 1 ${COUNT}; exit 7`, marker], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const hash = createHash('sha256');
      let bytes = 0;
      let stderr = '';
      cli.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      const firstBytes = new Promise<void>((resolve) => {
        cli.stdout!.on('data', (d: Buffer) => {
          hash.update(d);
          bytes += d.length;
          resolve();
        });
      });
      const closed = new Promise<number | null>((resolve) => cli.once('close', (code) => resolve(code)));
      await firstBytes;
      await server.stop('SIGKILL');
      await server.successor();
      const code = await Promise.race([
        closed,
        new Promise<never>((_, reject) =>
          setTimeout(() => reject(new Error(`exec still running after 40 s: ${bytes} bytes; ${stderr}; server: ${server.current.stderr().slice(-1500)}`)), 40_000),
        ),
      ]);
      expect(code, stderr).toBe(7);
      const expected = expectedDigest();
      expect(bytes).toBe(expected.bytes);
      expect(hash.digest('hex')).toBe(expected.sha256);
    },
    TEST_TIMEOUT_MS,
  );
});
