/**
 * A `tether serve` that a test restarts (issue #27): a server as a child process on a fixed
 * loopback port and a state dir of its own, and its successor on the same port and state
 * dir, as the same user, started only once the predecessor has exited.
 */
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { spawnTether } from './cli.js';
import { disposeStateDir, freePort, makeStateDir, startServerProcess, type ServerProcess, type ServerUser } from './server-process.js';

/** The `--adopt-within` the restart tests give (the keepers' countdown after their server is gone). */
export const ADOPT_WITHIN = '20s';
export const ADOPT_WITHIN_MS = 20_000;

export interface RestartableServer {
  user: ServerUser;
  port: number;
  stateDir: string;
  /** Every server started so far, the current one last. */
  servers: ServerProcess[];
  readonly current: ServerProcess;
  readonly url: string;
  /** Sends `signal` to the current server and resolves once it has exited. */
  stop(signal: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Starts the successor (the current server must have exited). */
  successor(): Promise<ServerProcess>;
  /** Kills every server still running, the keepers left in the state dir, removes the dirs. */
  dispose(): Promise<void>;
}

export async function startRestartableServer(user: ServerUser, extraArgs: string[] = []): Promise<RestartableServer> {
  const stateDir = makeStateDir(user);
  const port = await freePort();
  const args = ['--adopt-within', ADOPT_WITHIN, ...extraArgs];
  const servers: ServerProcess[] = [];
  const start = async () => {
    const server = await startServerProcess({ user, port, stateDir, args });
    servers.push(server);
    return server;
  };
  try {
    await start();
  } catch (error) {
    await disposeStateDir(stateDir);
    throw error;
  }
  const current = () => servers[servers.length - 1]!;
  return {
    user,
    port,
    stateDir,
    servers,
    get current() {
      return current();
    },
    get url() {
      return current().url;
    },
    async stop(signal) {
      const server = current();
      server.child.kill(signal);
      return server.exited;
    },
    async successor() {
      const previous = current();
      if (previous.child.exitCode === null && previous.child.signalCode === null) {
        throw new Error('successor() while the previous server still runs');
      }
      return start();
    },
    async dispose() {
      for (const server of servers.splice(0)) await server.dispose();
      await disposeStateDir(stateDir);
    },
  };
}

/** Collects a child's output; `waitFor(text)` resolves once that text has arrived on the stream. */
export function watchOutput(child: ChildProcess): {
  stdout(): string;
  stderr(): string;
  waitStdout(text: string | RegExp, timeoutMs?: number): Promise<void>;
  waitStderr(text: string | RegExp, timeoutMs?: number): Promise<void>;
  closed: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** `closed`, or a rejection after `timeoutMs` saying what the child printed (and `context()`). */
  closedWithin(timeoutMs: number, context?: () => string): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
} {
  const text = { stdout: '', stderr: '' };
  const waiters = new Set<() => void>();
  for (const name of ['stdout', 'stderr'] as const) {
    child[name]!.on('data', (d: Buffer) => {
      text[name] += d.toString();
      for (const w of [...waiters]) w();
    });
  }
  const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('close', (code, signal) => resolve({ code, signal })),
  );
  const wait = (name: 'stdout' | 'stderr') => (pattern: string | RegExp, timeoutMs = 15_000) =>
    new Promise<void>((resolve, reject) => {
      const matches = () => (typeof pattern === 'string' ? text[name].includes(pattern) : pattern.test(text[name]));
      const check = () => {
        if (!matches()) return;
        clearTimeout(timer);
        waiters.delete(check);
        resolve();
      };
      const timer = setTimeout(() => {
        waiters.delete(check);
        reject(new Error(`no ${String(pattern)} on ${name} within ${timeoutMs} ms; stdout: ${text.stdout.slice(-500)}; stderr: ${text.stderr.slice(-1500)}`));
      }, timeoutMs);
      waiters.add(check);
      void closed.then(() => {
        if (!waiters.has(check)) return;
        check();
        if (!waiters.has(check)) return;
        waiters.delete(check);
        clearTimeout(timer);
        reject(new Error(`exited before ${String(pattern)} on ${name}; stdout: ${text.stdout.slice(-500)}; stderr: ${text.stderr.slice(-1500)}`));
      });
      check();
    });
  const closedWithin = (timeoutMs: number, context: () => string = () => '') =>
    new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`still running after ${timeoutMs} ms; stdout: ${text.stdout.slice(-500)}; stderr: ${text.stderr.slice(-1500)}; ${context()}`)),
        timeoutMs,
      );
      void closed.then((result) => {
        clearTimeout(timer);
        resolve(result);
      });
    });
  return { stdout: () => text.stdout, stderr: () => text.stderr, waitStdout: wait('stdout'), waitStderr: wait('stderr'), closed, closedWithin };
}

/** The lines the paced producer of `execProducer` prints, and its whole output. */
export const PRODUCER_LINES = 60;
export const PRODUCER_OUTPUT = Array.from({ length: PRODUCER_LINES }, (_, i) => `line ${i + 1}\n`).join('');

/**
 * `tether exec` of a paced producer (lines 1..PRODUCER_LINES, then exit 7) against `server`,
 * its output watched; the client process is also pushed to `children` (for the test to reap).
 */
export function execProducer(server: RestartableServer, children: ChildProcess[] = []): ReturnType<typeof watchOutput> {
  const marker = `producer-${randomUUID()}`;
  const producer = `for i in $(seq 1 ${PRODUCER_LINES}); do echo "line $i"; sleep 0.05; done; exit 7`;
  const child = spawnTether(['exec', '--url', server.url, '--recovery-deadline', '120s', 'sh', '-c', producer, marker], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  return watchOutput(child);
}
