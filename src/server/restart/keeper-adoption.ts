/**
 * Adopting the kept keepers a predecessor left in the state dir's `k/` (kept-server.ts
 * `adoptAll`): all at once (at most ADOPT_PARALLEL in flight), each within ADOPT_TIMEOUT_MS
 * and with a dump no larger than its limits allow. One that refuses or does not answer in
 * time is logged and left to its own adopt timer; a stale socket (nothing listens) is removed.
 */
import { unlink } from 'node:fs/promises';
import { basename } from 'node:path';
import type { Logger } from '../../util/logger.js';
import type { AdoptedChild } from '../backend/index.js';
import { adoptChild } from '../local/index.js';
import type { OutputLimits } from '../output/index.js';
import { keeperCapBytes, parseMeta, type KeptMeta } from './kept-meta.js';

/**
 * How long one keeper has to hand itself over (connect, descriptors, dump) at start. All are
 * adopted at once, so this bounds the whole adoption; a keeper that does not make it is left
 * to its own adopt timer (--adopt-within), its processes alive for a later server.
 */
export const ADOPT_TIMEOUT_MS = 5_000;
/**
 * Keepers adopted at once (one slow to send its descriptors is waited for on a worker thread:
 * receive-fds.ts). It bounds what dumps in flight can make the start hold (16 × the largest
 * dump) against how long keepers that never answer can delay the others (5 s per 16 of them).
 */
const ADOPT_PARALLEL = 16;
/** A dump's room besides the retained output: meta, marks, writeIds (4096 of at most 1 KiB). */
const DUMP_SLACK_BYTES = 8 * 1024 * 1024;

/** A keeper adopted: its socket, its meta (null: not one of ours), its child. */
export interface Adopted {
  socketPath: string;
  meta: KeptMeta | null;
  child: AdoptedChild;
}

/**
 * Adopts the keepers at `sockets`, each with the dump room of its output `limitsOf` (by socket
 * name); `left` is told how many are still to go as each settles. Resolves with those adopted,
 * in the order of their sockets (restore is deterministic); never rejects for what a keeper does.
 */
export async function adoptKeepers(sockets: readonly string[], limitsOf: (socketName: string) => OutputLimits, log: Logger, left: (count: number) => void): Promise<Adopted[]> {
  let count = sockets.length;
  left(count);
  const adopted = new Map<string, Adopted>();
  await forEachAtOnce(sockets, ADOPT_PARALLEL, async (socketPath) => {
    const maxDump = keeperCapBytes(limitsOf(basename(socketPath))) + DUMP_SLACK_BYTES;
    let meta: KeptMeta | null = null;
    try {
      const child = await adoptChild(
        socketPath,
        ADOPT_TIMEOUT_MS,
        (dump) => {
          meta = parseMeta(dump.meta);
          return { tty: meta?.tty ?? false, pipeStdin: meta?.stdin ?? false };
        },
        maxDump,
      );
      adopted.set(socketPath, { socketPath, meta, child });
    } catch (err) {
      // Nothing listens there (its keeper was killed outright): a stale file, removed.
      const stale = (err as NodeJS.ErrnoException).code === 'ECONNREFUSED' && (await unlink(socketPath).then(() => true, () => false));
      log('warn', `state dir: keeper ${basename(socketPath)} not adopted: ${(err as Error).message}${stale ? ' (stale socket removed)' : ' (left to its own --adopt-within)'}`);
    } finally {
      left(--count);
    }
  });
  return sockets.flatMap((path) => adopted.get(path) ?? []);
}

/** Runs `work` on every item, at most `limit` at once; resolves when all are done (`work` must not reject). */
async function forEachAtOnce<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) await work(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
}
