/**
 * The measurements the bench modules share, over a raw Codex-dialect client (ws-rpc.ts): an
 * echo round trip, spawn→closed, and the throughput of one `head -c` output.
 */
import { performance } from 'node:perf_hooks';
import { startParams, type WsRpc } from './ws-rpc.js';

/** Upper bound for any single wait, so a stuck server cannot hang a bench. */
export const STEP_TIMEOUT_MS = 60_000;
export const THROUGHPUT_BYTES = 64 * 1024 * 1024;

let processCounter = 0;
export const newProcessId = (kind: string): string => `bench-${kind}-${process.pid}-${++processCounter}`;

/** Decoded size of a base64 string without decoding it. */
export function base64Bytes(chunk: string): number {
  const padding = chunk.endsWith('==') ? 2 : chunk.endsWith('=') ? 1 : 0;
  return (chunk.length / 4) * 3 - padding;
}

export function withTimeout<T>(promise: Promise<T>, what: string, timeoutMs = STEP_TIMEOUT_MS): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not finish within ${timeoutMs} ms`)), timeoutMs);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** process/write of one line to `cat` → its process/output notification. */
export async function echoRoundTrip(rpc: WsRpc, samples: number, warmup: number): Promise<number[]> {
  const processId = newProcessId('echo');
  let received = '';
  let waiting: { token: string; resolve: () => void } | undefined;
  rpc.onProcess(processId, (method, params) => {
    if (method !== 'process/output') return;
    received += Buffer.from(params.chunk, 'base64').toString('utf8');
    if (waiting && received.includes(waiting.token)) {
      const { resolve } = waiting;
      waiting = undefined;
      received = '';
      resolve();
    }
  });
  await rpc.request('process/start', startParams(processId, ['/bin/cat'], { pipeStdin: true }));
  const times: number[] = [];
  for (let i = 0; i < warmup + samples; i++) {
    const token = `echo-${i}\n`;
    const echoed = new Promise<void>((resolve) => {
      waiting = { token, resolve };
    });
    const started = performance.now();
    const write = rpc.request<{ status: string }>('process/write', {
      processId,
      chunk: Buffer.from(token).toString('base64'),
      writeId: `${processId}-w${i}`,
    });
    await withTimeout(echoed, 'echo');
    const elapsed = performance.now() - started;
    const { status } = await write;
    if (status !== 'accepted') throw new Error(`process/write answered ${status}`);
    if (i >= warmup) times.push(elapsed);
  }
  await rpc.request('process/terminate', { processId });
  rpc.offProcess(processId);
  return times;
}

/** process/start of /bin/true → its process/closed notification. */
export async function spawnToClosed(rpc: WsRpc, samples: number, warmup: number): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < warmup + samples; i++) {
    const processId = newProcessId('spawn');
    const closed = new Promise<void>((resolve) => {
      rpc.onProcess(processId, (method) => {
        if (method === 'process/closed') resolve();
      });
    });
    const started = performance.now();
    await rpc.request('process/start', startParams(processId, ['/bin/true']));
    await withTimeout(closed, 'spawn');
    const elapsed = performance.now() - started;
    rpc.offProcess(processId);
    if (i >= warmup) times.push(elapsed);
  }
  return times;
}

/** MiB/s of one `head -c 64MiB /dev/zero`, from process/start to process/closed. */
export async function throughputRun(rpc: WsRpc, bytes = THROUGHPUT_BYTES): Promise<number> {
  const processId = newProcessId('throughput');
  let received = 0;
  const closed = new Promise<void>((resolve) => {
    rpc.onProcess(processId, (method, params) => {
      if (method === 'process/output') received += base64Bytes(params.chunk);
      else if (method === 'process/closed') resolve();
    });
  });
  const started = performance.now();
  await rpc.request('process/start', startParams(processId, ['/usr/bin/head', '-c', String(bytes), '/dev/zero']));
  await withTimeout(closed, 'throughput');
  const seconds = (performance.now() - started) / 1000;
  rpc.offProcess(processId);
  if (received !== bytes) throw new Error(`throughput run received ${received} bytes, expected ${bytes}`);
  return bytes / 1024 / 1024 / seconds;
}

