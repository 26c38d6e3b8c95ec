/**
 * When faults are in force: a fault holds always, within a window of time after the start
 * (`10s..20s`), or for a part of every period (`5s/30s`: the last 5 s of every 30 s, so the
 * link starts healthy). `ChaosPlan` applies a list of scheduled faults to a proxy as time
 * passes; where windows of the same kind overlap, the one given last wins.
 */
import type { BlackholeMode, ChaosProxy, Direction } from './proxy.js';

export type Window =
  | { kind: 'always' }
  | { kind: 'between'; fromMs: number; toMs: number }
  | { kind: 'periodic'; forMs: number; everyMs: number };

export type Fault =
  | { kind: 'latency'; ms: number; jitterMs: number }
  | { kind: 'bandwidth'; bytesPerSecond: number }
  | { kind: 'blackhole'; mode: BlackholeMode }
  | { kind: 'refuse' }
  /** Cuts every live connection at intervals in [minMs, maxMs] (equal: fixed). */
  | { kind: 'reset'; minMs: number; maxMs: number }
  | { kind: 'resetAfter'; bytes: number; direction: Direction };

export type FaultKind = Fault['kind'];

export interface ScheduledFault {
  fault: Fault;
  window: Window;
}

export function isActive(window: Window, t: number): boolean {
  switch (window.kind) {
    case 'always':
      return true;
    case 'between':
      return t >= window.fromMs && t < window.toMs;
    case 'periodic':
      return t % window.everyMs >= window.everyMs - window.forMs;
  }
}

/** The first time after `t` at which `isActive` changes, or undefined if it never does. */
export function nextChange(window: Window, t: number): number | undefined {
  switch (window.kind) {
    case 'always':
      return undefined;
    case 'between':
      if (t < window.fromMs) return window.fromMs;
      if (t < window.toMs && Number.isFinite(window.toMs)) return window.toMs;
      return undefined;
    case 'periodic': {
      const phase = t % window.everyMs;
      const onAt = window.everyMs - window.forMs;
      return t - phase + (phase < onAt ? onAt : window.everyMs);
    }
  }
}

/** For each kind, the fault in force at `t` (the last active one given), in kind order. */
export function faultsAt(plan: readonly ScheduledFault[], t: number): Map<FaultKind, Fault> {
  const active = new Map<FaultKind, Fault>();
  for (const { fault, window } of plan) if (isActive(window, t)) active.set(fault.kind, fault);
  return active;
}

export interface PlanClock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const realClock: PlanClock = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

const KINDS: FaultKind[] = ['latency', 'bandwidth', 'blackhole', 'refuse', 'reset', 'resetAfter'];

/** Applies scheduled faults to a proxy from `start()` until `stop()` (which heals the link). */
export class ChaosPlan {
  private startedAt = 0;
  private timer: unknown;
  private applied = new Map<FaultKind, Fault>();
  private running = false;

  constructor(
    private readonly proxy: ChaosProxy,
    private readonly plan: readonly ScheduledFault[],
    private readonly clock: PlanClock = realClock,
  ) {}

  start(): void {
    this.running = true;
    this.startedAt = this.clock.now();
    this.tick();
  }

  stop(): void {
    this.running = false;
    this.clock.clearTimeout(this.timer);
    this.proxy.heal();
    this.applied.clear();
  }

  private tick(): void {
    if (!this.running) return;
    const t = this.clock.now() - this.startedAt;
    const want = faultsAt(this.plan, t);
    for (const kind of KINDS) {
      const before = this.applied.get(kind);
      const after = want.get(kind);
      if (before === after) continue;
      this.apply(kind, after);
    }
    this.applied = want;
    const next = Math.min(...this.plan.map(({ window }) => nextChange(window, t) ?? Infinity));
    if (Number.isFinite(next)) this.timer = this.clock.setTimeout(() => this.tick(), Math.max(0, next - t));
  }

  private apply(kind: FaultKind, fault: Fault | undefined): void {
    const proxy = this.proxy;
    switch (kind) {
      case 'latency':
        if (fault?.kind === 'latency') proxy.setLatency(fault.ms, fault.jitterMs);
        else proxy.setLatency(0);
        return;
      case 'bandwidth':
        proxy.setBandwidth(fault?.kind === 'bandwidth' ? fault.bytesPerSecond : 0);
        return;
      case 'blackhole':
        if (fault?.kind === 'blackhole') proxy.blackhole(true, fault.mode);
        else proxy.blackhole(false);
        return;
      case 'refuse':
        proxy.refuse(fault !== undefined);
        return;
      case 'reset':
        if (fault?.kind === 'reset') proxy.cutRandomly({ minMs: fault.minMs, maxMs: fault.maxMs });
        else proxy.stopCutting();
        return;
      case 'resetAfter':
        if (fault?.kind === 'resetAfter') proxy.cutAfterBytes(fault.bytes, { direction: fault.direction, repeat: true });
        else proxy.stopCuttingAfterBytes();
        return;
    }
  }
}
