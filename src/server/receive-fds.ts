/**
 * A successor's first step of adopting a keeper (keeper-kept.ts `connectAdoption`): connect to
 * its socket and receive its descriptors, off the main thread. The addon's
 * `connectReceiveFds` blocks (SO_RCVTIMEO) until the keeper sends them; on the main thread a
 * keeper that accepts and never answers would stall everything else for its whole deadline,
 * and several such would be adopted one after the other. In a worker each waits on its own,
 * all at once. Descriptors belong to the process, so the numbers the worker receives are ours.
 *
 * The worker loads the same addon (context-aware: NAPI_MODULE_INIT). Should a worker not
 * start, the call is made here, as before.
 */
import { Worker } from 'node:worker_threads';
import { nativeAddon, nativeBuild } from './native.js';

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

/** `connectReceiveFds(path, timeoutMs)` in a worker thread: the same result, or the same error (its `code` kept). */
export async function receiveFds(path: string, timeoutMs: number): Promise<{ socket: number; fds: number[] }> {
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
