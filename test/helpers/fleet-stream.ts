/**
 * A stream through a front door for the fleet tests: `tether exec` of the keystream fixture
 * (`bytes` bytes, then exit `exit`) at `url`, its stdout hashed as it arrives. Whenever the
 * bytes received cross one of `marks`, reading stops and `at(mark)` is awaited before it goes
 * on: the stream cannot finish while the test acts (reloads a proxy, kills a host).
 */
import { createHash, randomUUID } from 'node:crypto';
import { spawnTether } from './cli.js';
import { KEYSTREAM, keystreamDigest } from './keystream.js';

export interface StreamResult {
  code: number | null;
  received: number;
  digest: string;
  expected: string;
  stderr: string;
  /** Marks never reached (the stream ended first). */
  marksLeft: number[];
}

export async function streamThrough(
  url: string,
  access: { ca: string; tokenFile?: string },
  bytes: number,
  exit: number,
  marks: number[] = [],
  at: (mark: number) => Promise<void> = async () => {},
): Promise<StreamResult> {
  const seed = randomUUID();
  const token = access.tokenFile !== undefined ? ['--token-file', access.tokenFile] : [];
  const argv = ['exec', '--url', url, '--ca', access.ca, ...token, '--recovery-deadline', '120s', process.execPath, KEYSTREAM, String(bytes), seed, String(exit)];
  const child = spawnTether(argv, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TETHER_TOKEN: '' } });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const hash = createHash('sha256');
  let received = 0;
  const pending = [...marks];
  const acting: Promise<void>[] = [];
  child.stdout!.on('data', (d: Buffer) => {
    hash.update(d);
    received += d.length;
    if (pending.length > 0 && received >= pending[0]!) {
      const mark = pending.shift()!;
      child.stdout!.pause();
      acting.push(at(mark).finally(() => void child.stdout!.resume()));
    }
  });
  const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));
  await Promise.all(acting);
  return { code, received, digest: hash.digest('hex'), expected: keystreamDigest(bytes, seed), stderr, marksLeft: pending };
}
