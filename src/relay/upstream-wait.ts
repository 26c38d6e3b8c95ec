/**
 * What the relay says while its first upstream connection is being made (RemoteBackend.connect),
 * which retries until the recovery deadline (5 minutes by default in the CLI): at once, the
 * client's own first failure ("cannot reach URL (why); retrying for up to N s"); then every
 * `everyMs` until it is made or given up, that it still tries and for how long more (also when
 * no attempt has failed yet: one that hangs, to a black hole). Pure but for its timer.
 */
import type { Logger } from '../util/logger.js';
import { formatAge } from '../util/format.js';

/** How often the relay repeats that it still cannot reach its upstream. */
export const UPSTREAM_REPORT_EVERY_MS = 5_000;

export interface UpstreamWait {
  /** Give it to the connecting client: its warnings (the first failure) are told at once. */
  readonly logger: Logger;
  /** The connection is made, or given up: no more lines. */
  stop(): void;
}

export function upstreamWaitReport(options: {
  url: string;
  /** The recovery deadline of the connection being made (unknown: the client's default). */
  deadlineMs?: number;
  log: (message: string) => void;
  everyMs?: number;
  now?: () => number;
}): UpstreamWait {
  const now = options.now ?? Date.now;
  const startedAt = now();
  const everyMs = options.everyMs ?? UPSTREAM_REPORT_EVERY_MS;
  let stopped = false;
  let failed = false;
  const timer = setInterval(() => {
    const elapsed = now() - startedAt;
    const what = failed ? 'still cannot reach' : 'still connecting to';
    const left = options.deadlineMs === undefined ? '' : ` for up to ${formatAge(Math.max(0, options.deadlineMs - elapsed))} more`;
    options.log(`${what} the upstream ${options.url} after ${formatAge(elapsed)}; retrying${left}`);
  }, everyMs).unref();
  return {
    logger: (level, message) => {
      if (stopped || level !== 'warn') return;
      failed = true;
      options.log(message);
    },
    stop() {
      stopped = true;
      clearInterval(timer);
    },
  };
}
