/**
 * The servers a benchmark compares, each as a separate OS process so that its CPU and memory
 * are its own: tether (`node bin/tether.js serve`) and the real Codex exec-server.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { startCodexServer } from '../../test/helpers/codex.js';
import { childPids } from './rss.js';

export interface BenchServer {
  name: 'tether' | 'codex';
  url: string;
  /** Pid of the process that serves (for Codex: the native binary, not its node launcher). */
  pid: number;
  stop(): Promise<void>;
}

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));

export async function startTetherProcess(extraArgs: string[] = []): Promise<BenchServer> {
  const child = spawn(process.execPath, ['bin/tether.js', 'serve', '--listen', 'ws://127.0.0.1:0', ...extraArgs], {
    cwd: repoRoot,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NODE_ENV: 'production' },
  });
  const stderr: string[] = [];
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr.push(chunk.toString());
    if (stderr.length > 50) stderr.shift();
  });
  const url = await firstLine(child, 'tether serve', () => stderr.join(''));
  return { name: 'tether', url, pid: child.pid!, stop: () => stopChild(child) };
}

export async function startCodexProcess(): Promise<BenchServer> {
  const codex = await startCodexServer({});
  // The npm `codex` command is a node launcher that runs the native binary as its child.
  const native = childPids(codex.child.pid!)[0] ?? codex.child.pid!;
  return { name: 'codex', url: codex.url, pid: native, stop: () => codex.stop() };
}

function firstLine(child: ChildProcess, what: string, diagnostics: () => string): Promise<string> {
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    const timer = setTimeout(() => reject(new Error(`${what} printed no URL within 20 s\n${diagnostics()}`)), 20_000);
    lines.once('line', (line) => {
      clearTimeout(timer);
      lines.close();
      child.stdout!.resume();
      resolve(line.trim());
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited early with code ${code}\n${diagnostics()}`));
    });
  });
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 3_000);
  await exited;
  clearTimeout(timer);
}
