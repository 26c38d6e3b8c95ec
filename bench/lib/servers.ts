/**
 * The servers a benchmark compares, each as a separate OS process so that its CPU and memory
 * are its own: tether (`node bin/tether.js serve`) and the real Codex exec-server.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { startCodexServer } from '../../test/helpers/codex.js';
import { childPids } from './rss.js';

export interface BenchServer {
  name: 'tether' | 'codex' | 'relay' | 'floor' | 'link';
  url: string;
  /** Pid of the process that serves (for Codex: the native binary, not its node launcher). */
  pid: number;
  stop(): Promise<void>;
}

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));

/**
 * Node flags for every Node process a bench starts (BENCH_NODE_ARGS, split on spaces), e.g.
 * `--cpu-prof --cpu-prof-dir=/tmp/prof` to profile them (Node refuses --cpu-prof in NODE_OPTIONS).
 */
export const benchNodeArgs = (): string[] => (process.env.BENCH_NODE_ARGS ?? '').split(' ').filter((arg) => arg !== '');

/**
 * Pids of every server process still running. If the bench dies (a crash, Ctrl-C), the exit
 * hook sends them SIGTERM so no server outlives it (the Codex launcher and its native child
 * both); SIGTERM rather than SIGKILL so each server still kills the processes it started.
 */
const livePids = new Set<number>();
let exitHookInstalled = false;

function track(pids: number[]): () => void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', () => {
      for (const pid of livePids) {
        try {
          process.kill(pid, 'SIGTERM');
        } catch {
          // already gone
        }
      }
    });
  }
  for (const pid of pids) livePids.add(pid);
  return () => {
    for (const pid of pids) livePids.delete(pid);
  };
}

/** For a bench's entry point: Ctrl-C, SIGTERM and crashes go through process.exit (and the exit hook). */
export function exitCleanlyOnSignalsAndCrashes(): void {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(130));
  const crash = (error: unknown): void => {
    console.error('bench crashed:', error);
    process.exit(1);
  };
  process.on('uncaughtException', crash);
  process.on('unhandledRejection', crash);
}

export async function startTetherProcess(extraArgs: string[] = []): Promise<BenchServer> {
  return startCliServer('tether', ['serve', '--listen', 'ws://127.0.0.1:0', ...extraArgs]);
}

/** `tether relay` in front of `upstreamUrl`, listening on loopback without a downstream token. */
export async function startRelayProcess(upstreamUrl: string, extraArgs: string[] = []): Promise<BenchServer> {
  return startCliServer('relay', ['relay', '--to', upstreamUrl, '--listen', 'ws://127.0.0.1:0', '--insecure-no-token', ...extraArgs]);
}

/**
 * The bare proxy (proxy-floor.ts) in front of `upstreamUrl`: what any relay process costs at
 * least on this machine (one more process, two more socket hops, every message received and
 * sent again), the floor bench/relay.ts measures the relay against.
 */
export async function startProxyFloorProcess(upstreamUrl: string): Promise<BenchServer> {
  return startUrlPrinter('floor', 'the proxy floor', ['--import', 'tsx', 'bench/lib/proxy-floor.ts', '--to', upstreamUrl], {});
}

/**
 * The server half of the MCP floor (mcp-floor-server.ts): a bare WebSocket server that runs
 * `command` per connection and passes bytes as they are, what any remote stdio path costs at
 * least on the server's side.
 */
export async function startMcpFloorProcess(command: string[]): Promise<BenchServer> {
  return startUrlPrinter('floor', 'the MCP floor', ['--import', 'tsx', 'bench/lib/mcp-floor-server.ts', '--', ...command], {});
}

/**
 * `tether chaos` in front of `upstreamUrl` with `latency` each way and no other fault: a link
 * with a round trip (bench/relay.ts's BENCH_RELAY_LINK).
 */
export async function startLinkProcess(upstreamUrl: string, latency: string): Promise<BenchServer> {
  // Given a ws:// target, it prints a ws:// URL.
  return startCliServer('link', ['chaos', '--to', upstreamUrl, '--latency', latency, '--quiet']);
}

/** A `tether` command that prints the URL it serves on as its first stdout line. */
async function startCliServer(name: BenchServer['name'], args: string[]): Promise<BenchServer> {
  // Each server its own default state dir (issue #27: tether serve keeps sessions there and
  // locks it), so servers run side by side as they always did; --state-dir overrides it.
  const stateHome = mkdtempSync(path.join(tmpdir(), 'tether-bench-state-'));
  return startUrlPrinter(name, `tether ${args[0]}`, ['bin/tether.js', ...args], { XDG_STATE_HOME: stateHome }, () =>
    rmSync(stateHome, { recursive: true, force: true }),
  );
}

/** `node ...nodeArgs` from the repo root, once it printed its URL as its first stdout line; `exited` runs when it exits. */
async function startUrlPrinter(
  name: BenchServer['name'],
  what: string,
  nodeArgs: string[],
  env: Record<string, string>,
  exited?: () => void,
): Promise<BenchServer> {
  const child = spawn(process.execPath, [...benchNodeArgs(), ...nodeArgs], {
    cwd: repoRoot,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NODE_ENV: 'production', ...env },
  });
  if (exited) child.once('exit', exited);
  const stderr: string[] = [];
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr.push(chunk.toString());
    if (stderr.length > 50) stderr.shift();
  });
  const untrack = track([child.pid!]);
  const url = await firstLine(child, what, () => stderr.join(''));
  return {
    name,
    url,
    pid: child.pid!,
    stop: async () => {
      await stopChild(child);
      untrack();
    },
  };
}

export async function startCodexProcess(): Promise<BenchServer> {
  const codex = await startCodexServer({});
  // The npm `codex` command is a node launcher that runs the native binary as its child.
  const native = childPids(codex.child.pid!)[0] ?? codex.child.pid!;
  const untrack = track([codex.child.pid!, native]);
  return {
    name: 'codex',
    url: codex.url,
    pid: native,
    stop: async () => {
      await codex.stop();
      untrack();
    },
  };
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
