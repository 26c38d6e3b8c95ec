/**
 * How tests run the `tether` command: one place, so every CLI test runs the same entry.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** argv (after the node binary) that runs `tether <args…>`. */
export function tetherArgs(args: string[]): string[] {
  return [path.join(repoRoot, 'bin/tether.js'), ...args];
}

/** `tether <args…>` as a shell command prefix (for pipelines run with bash -c). */
export function tetherShell(args: string[]): string {
  return [process.execPath, ...tetherArgs(args)].map(shellQuote).join(' ');
}

export function spawnTether(args: string[], options: SpawnOptions = {}): ChildProcess {
  return spawn(process.execPath, tetherArgs(args), { cwd: repoRoot, ...options });
}

export interface CliRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs to completion; `input` is written to stdin, which is then closed. */
export function runTether(args: string[], options: { input?: string; env?: NodeJS.ProcessEnv; onStdout?: (text: string, child: ChildProcess) => void } = {}): Promise<CliRun> {
  return collect(spawnTether(args, { stdio: ['pipe', 'pipe', 'pipe'], env: options.env ?? process.env }), options);
}

/** Runs a bash command line (pipelines: `tetherShell([...]) + ' | wc -c'`). */
export function runShell(command: string): Promise<CliRun> {
  return collect(spawn('bash', ['-c', command], { cwd: repoRoot, stdio: ['pipe', 'pipe', 'pipe'] }), { input: '' });
}

function collect(child: ChildProcess, options: { input?: string; onStdout?: (text: string, child: ChildProcess) => void }): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      options.onStdout?.(stdout, child);
    });
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }));
    if (options.input !== undefined) child.stdin!.end(options.input);
  });
}

function shellQuote(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}
