/**
 * What the chaos proxy sums up in `stats()`: connections accepted, refused, live at most,
 * ended by a quota or by an unreachable target, and the bytes of the links gone added to
 * those of the live ones.
 */
import { performance } from 'node:perf_hooks';
import type { PipeCounters } from './pipe.js';
import type { ChaosStats, CloseReason } from './proxy-types.js';

const zero = (): PipeCounters => ({ forwarded: 0, held: 0, dropped: 0 });
const add = (into: PipeCounters, more: PipeCounters) => {
  into.forwarded += more.forwarded;
  into.held += more.held;
  into.dropped += more.dropped;
};

/** A link's two directions, as counted by its pipes. */
export interface CountedLink {
  readonly up: { readonly counters: PipeCounters };
  readonly down: { readonly counters: PipeCounters };
}

export class ProxyTotals {
  private readonly startedAt = performance.now();
  private accepted = 0;
  private refused = 0;
  private peakActive = 0;
  private quotaCuts = 0;
  private targetFailures = 0;
  private readonly up = zero();
  private readonly down = zero();

  /** A connection was accepted; `active` are live now, it included. */
  opened(active: number): void {
    this.accepted++;
    this.peakActive = Math.max(this.peakActive, active);
  }

  /** A new connection was reset at once. */
  refusedOne(): void {
    this.refused++;
  }

  /** A link ended: its bytes join the totals. */
  closed(link: CountedLink, reason: CloseReason): void {
    add(this.up, link.up.counters);
    add(this.down, link.down.counters);
    if (reason === 'quota') this.quotaCuts++;
    if (reason === 'target-unreachable') this.targetFailures++;
  }

  /** The stats now, the `live` links' bytes added, with `cuts` so far. */
  snapshot(live: ReadonlySet<CountedLink>, cuts: number): ChaosStats {
    const up = { ...this.up };
    const down = { ...this.down };
    for (const link of live) {
      add(up, link.up.counters);
      add(down, link.down.counters);
    }
    return {
      uptimeMs: Math.round(performance.now() - this.startedAt),
      accepted: this.accepted,
      refused: this.refused,
      active: live.size,
      peakActive: this.peakActive,
      cuts,
      quotaCuts: this.quotaCuts,
      targetFailures: this.targetFailures,
      up,
      down,
    };
  }
}
