/**
 * `tether serve` as a separate process, optionally as an unprivileged user (the machines
 * and CI run as root, where descriptor and /proc checks prove nothing) and with a given
 * descriptor limit. `prlimit` and `setpriv` exec in place, so `child.pid` is the server's.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export const TETHER_BIN = join(import.meta.dirname, '..', '..', 'bin', 'tether.js');

/** uid/gid 65534 ("nobody"): no capabilities, no supplementary groups. */
export const UNPRIVILEGED = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', '--'];

export interface ServeProcessOptions {
  /** Run as uid/gid 65534. */
  unprivileged?: boolean;
  /** RLIMIT_NOFILE, soft and hard. */
  nofile?: number;
  env?: NodeJS.ProcessEnv;
}

export interface ServeProcess {
  url: string;
  child: ChildProcess;
  stderr(): string;
  /** SIGTERM, then SIGKILL after 5 s; resolves when it exited. */
  stop(): Promise<void>;
}

export async function spawnServe(args: string[], options: ServeProcessOptions = {}): Promise<ServeProcess> {
  const argv = [
    ...(options.nofile !== undefined ? ['prlimit', `--nofile=${options.nofile}:${options.nofile}`, '--'] : []),
    ...(options.unprivileged ? UNPRIVILEGED : []),
    process.execPath,
    TETHER_BIN,
    'serve',
    ...args,
    // Today's behaviour unless the test asks for a state dir (issue #27): the default, a
    // per-user dir, would be shared by every test's server.
    ...(args.some((a) => a.startsWith('--state-dir')) || args.includes('stdio') ? [] : ['--state-dir', 'none']),
  ];
  const child = spawn(argv[0]!, argv.slice(1), {
    env: { ...process.env, TETHER_TOKEN: '', ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`tether serve exited ${code} before printing its URL: ${err}`)));
  });
  return {
    url: url.trim(),
    child,
    stderr: () => err,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exited;
        clearTimeout(timer);
      }
    },
  };
}
