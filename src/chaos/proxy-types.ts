/**
 * The types of the chaos proxy's surface: its options, the faults in force, what it reports
 * of a connection, its stats and its events. Types only (the proxy is proxy.ts).
 */
import type { PipeCounters } from './pipe.js';

export interface ChaosProxyOptions {
  targetPort: number;
  targetHost?: string;
  /** Where to listen (default 127.0.0.1, any free port). */
  listenHost?: string;
  listenPort?: number;
  /** Deterministic jitter and random cuts: a source of numbers in [0, 1). */
  random?: () => number;
  /** Queued bytes per direction and connection before the sender is paused (default 1 MiB). */
  highWaterMark?: number;
}

export interface CutRandomlyOptions {
  minMs: number;
  maxMs: number;
  signal?: AbortSignal;
  /** Deterministic runs (e.g. fast-check): a source of numbers in [0, 1). */
  random?: () => number;
}

/** 'up': client to target; 'down': target to client; 'both': the two added up. */
export type Direction = 'up' | 'down' | 'both';

export interface CutAfterBytesOptions {
  direction?: Direction;
  /** Every connection, now and later, gets the quota (default: only until the first cut). */
  repeat?: boolean;
}

export interface CutEachAfterOptions {
  /** Which bytes count (default 'down': what the target sends, e.g. a server's output). */
  direction?: Direction;
  /**
   * What happens once the quota crossed: 'reset' (default) resets both sides at once, so
   * whatever is still in flight (socket buffers, the peer's unread bytes) is lost;
   * 'blackhole' stops that connection in both directions without closing it (only a
   * keepalive can tell; the connection closes when a peer gives up on it). A function is
   * asked at each cut (a seeded mix of both).
   */
  action?: CutAction | (() => CutAction);
}

export type CutAction = 'reset' | 'blackhole';

export type BlackholeMode = 'hold' | 'drop';

/** What a connection did, as reported when it opens, closes or is cut. */
export interface ConnectionReport {
  id: number;
  /** The client's address and port. */
  remote: string;
  ageMs: number;
  /** Client to target: forwarded, still held (lost if the connection is cut now), dropped. */
  up: PipeCounters;
  /** Target to client. */
  down: PipeCounters;
}

/** Why a connection ended. */
export type CloseReason = 'cut' | 'quota' | 'client' | 'target' | 'target-unreachable' | 'proxy';

/** The faults in force right now. */
export interface FaultState {
  latencyMs: number;
  jitterMs: number;
  bandwidth: number;
  blackhole: false | BlackholeMode;
  refusing: boolean;
  cutting: false | { minMs: number; maxMs: number };
  quota: false | { bytes: number; direction: Direction; repeat: boolean };
}

export interface ChaosStats {
  /** Since the proxy started, in ms. */
  uptimeMs: number;
  accepted: number;
  refused: number;
  active: number;
  peakActive: number;
  /** Connections reset by a cut (cutAll, interval cuts). */
  cuts: number;
  /** Connections ended by a byte quota. */
  quotaCuts: number;
  targetFailures: number;
  up: PipeCounters;
  down: PipeCounters;
}

export interface ChaosProxyEvents {
  connection: [report: ConnectionReport];
  /** `cutEachAfter` with action 'blackhole' stopped a connection (it stays open). */
  blackholed: [report: ConnectionReport];
  close: [report: ConnectionReport, reason: CloseReason, error?: Error];
  cut: [count: number, reports: ConnectionReport[]];
  refused: [remote: string];
  fault: [state: FaultState];
}
