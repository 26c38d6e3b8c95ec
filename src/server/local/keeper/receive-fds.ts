/**
 * A successor's first step of adopting a keeper (kept.ts `connectAdoption`): connect to
 * its socket and receive its descriptors, off the main thread. The addon's
 * `connectReceiveFds` blocks (SO_RCVTIMEO) until the keeper sends them; on the main thread a
 * keeper that accepts and never answers would stall everything else for its whole deadline,
 * and several such would be adopted one after the other. In a worker each waits on its own,
 * all at once. Descriptors belong to the process, so the numbers the worker receives are ours.
 *
 * A keeper sends its descriptors the moment it accepts, so the call is first made here with a
 * short deadline (FAST_MS): a worker costs tens of milliseconds to start, and a successor
 * adopting hundreds of keepers must not pay that for each. Only a keeper that has not
 * answered by then (busy, or never answering) is waited for in a worker, for the rest of its
 * deadline; it takes the new connection once it sees the first one gone.
 *
 * The worker loads the same addon (context-aware: NAPI_MODULE_INIT). Should a worker not
 * start, the call is made here, as before.
 */
import { Worker } from 'node:worker_threads';
import { nativeAddon, nativeBuild } from '../../native/index.js';

/** Runs in the worker (CommonJS, `eval`): one call, one answer, then the worker ends. */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
let answer;
try {
  answer = { ok: require(workerData.addon).connectReceiveFds(workerData.path, workerData.timeoutMs) };
} catch (err) {
  answer = { message: String(err && err.message), code: err && err.code };
}
parentPort.postMessage(answer);
`;

type Answer = { ok: { socket: number; fds: number[] } } | { message: string; code?: string };

/** How long the first, blocking try waits for a keeper's descriptors on the main thread. */
const FAST_MS = 50;

/** `connectReceiveFds(path, timeoutMs)` without holding the main thread beyond FAST_MS: the same result, or the same error. */
export async function receiveFds(path: string, timeoutMs: number): Promise<{ socket: number; fds: number[] }> {
  const deadline = Date.now() + timeoutMs;
  try {
    return nativeAddon().connectReceiveFds(path, Math.min(FAST_MS, timeoutMs));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if ((code !== 'EAGAIN' && code !== 'EWOULDBLOCK') || Date.now() >= deadline) throw err;
  }
  return receiveFdsInWorker(path, Math.max(1, deadline - Date.now()));
}

/** `connectReceiveFds(path, timeoutMs)` in a worker thread: the same result, or the same error (its `code` kept). */
export async function receiveFdsInWorker(path: string, timeoutMs: number): Promise<{ socket: number; fds: number[] }> {
  const addon = nativeBuild()?.addon;
  if (!addon) return nativeAddon().connectReceiveFds(path, timeoutMs); // throws the clear "no build" error
  let worker: Worker;
  try {
    worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { addon, path, timeoutMs }, resourceLimits: { maxOldGenerationSizeMb: 16 } });
  } catch {
    return nativeAddon().connectReceiveFds(path, timeoutMs);
  }
  const answer = await new Promise<Answer>((resolve) => {
    worker.once('message', resolve);
    worker.once('error', (err) => resolve({ message: err.message }));
    worker.once('exit', () => resolve({ message: 'the adoption worker ended without an answer' }));
  });
  void worker.terminate();
  if ('ok' in answer) return answer.ok;
  throw Object.assign(new Error(answer.message), answer.code ? { code: answer.code } : {});
}
