/**
 * A 2025 backend's request to its client (sampling, elicitation) while a 2026-07-28 host's
 * call is in flight: that era has no server-to-client requests, so the host's call answers
 * `input_required` with the request embedded, and the host's retry (its `inputResponses`,
 * and the `requestState` echoed) answers the backend, whose call has run on meanwhile. The
 * backend call outlives the host's first HTTP request: it is kept here, under a random
 * `requestState` (an unguessable handle, never data the host could forge into something
 * else), until it completes, the host aborts a round, or nobody resumes it within
 * `resumeTimeoutMs`.
 */
import { randomUUID } from 'node:crypto';
import type { Result } from '@modelcontextprotocol/sdk/types.js';

/** A request the backend sent its client: `{ method, params }`. */
export type ClientBoundRequest = { method: string; params?: Record<string, unknown> };

interface Ask {
  key: string;
  request: ClientBoundRequest;
  answer(result: Result): void;
  fail(error: Error): void;
}

interface Pending {
  call: Promise<Result>;
  settled: boolean;
  asks: Ask[];
  wake: () => void;
  aborter: AbortController;
  timer: NodeJS.Timeout | undefined;
  seq: number;
}

/** What a call started through the bridge gets: a way to ask the host, and its own signal. */
export interface BridgedCall {
  ask(request: ClientBoundRequest): Promise<Result>;
  signal: AbortSignal;
}

export class InputBridge {
  private readonly pending = new Map<string, Pending>();

  constructor(
    private readonly resumeTimeoutMs: number,
    /** Calls waiting for their host's next round at most (memory bound): past it, a call asking ends with an error. */
    private readonly maxWaiting = 256,
  ) {}

  /** Calls waiting for their host's next round. */
  private get waiting(): number {
    let n = 0;
    for (const p of this.pending.values()) if (p.timer) n++;
    return n;
  }

  /** Calls in flight across host rounds (bounded by the hosts' rounds and resumeTimeoutMs). */
  get size(): number {
    return this.pending.size;
  }

  /**
   * One round of a host's call: resumes the call `requestState` names (answering its asks
   * from `inputResponses`), or starts one with `start`; resolves with its result, or with
   * `input_required` while it waits for the host.
   */
  async round(start: (call: BridgedCall) => Promise<Result>, hostSignal: AbortSignal, inputResponses: Record<string, unknown> | undefined, requestState: string | undefined): Promise<Result> {
    let id = requestState;
    let p = id === undefined ? undefined : this.pending.get(id);
    if (id !== undefined && !p) throw Object.assign(new Error('Invalid or expired requestState'), { code: -32602 });
    if (p) {
      clearTimeout(p.timer);
      p.timer = undefined;
      for (const ask of [...p.asks]) {
        const response = inputResponses?.[ask.key];
        if (response === undefined) continue;
        p.asks.splice(p.asks.indexOf(ask), 1);
        ask.answer(response as Result);
      }
    } else {
      id = randomUUID();
      p = this.open(start);
      this.pending.set(id, p);
    }
    const current = p;
    const onAbort = () => this.drop(id!, new Error('the host cancelled the call'));
    hostSignal.addEventListener('abort', onAbort, { once: true });
    try {
      await new Promise<void>((resolve) => {
        current.wake = resolve;
        if (current.settled || current.asks.length > 0) resolve();
      });
    } finally {
      hostSignal.removeEventListener('abort', onAbort);
    }
    if (current.settled) {
      this.pending.delete(id!);
      return current.call;
    }
    if (this.waiting >= this.maxWaiting) {
      const error = Object.assign(new Error(`too many calls (${this.maxWaiting}) waiting for their hosts' input: try again later`), { code: -32603 });
      this.drop(id!, error);
      throw error;
    }
    // Waiting for the host: nobody resuming it in time ends it.
    current.timer = setTimeout(() => this.drop(id!, new Error(`the host did not answer within ${this.resumeTimeoutMs} ms`)), this.resumeTimeoutMs);
    current.timer.unref?.();
    return { resultType: 'input_required', inputRequests: Object.fromEntries(current.asks.map((a) => [a.key, a.request])), requestState: id } as Result;
  }

  private open(start: (call: BridgedCall) => Promise<Result>): Pending {
    const aborter = new AbortController();
    const p: Pending = { call: Promise.resolve({}), settled: false, asks: [], wake: () => {}, aborter, timer: undefined, seq: 0 };
    const ask = (request: ClientBoundRequest) =>
      new Promise<Result>((answer, fail) => {
        p.asks.push({ key: `input-${++p.seq}`, request, answer, fail });
        p.wake();
      });
    p.call = start({ ask, signal: aborter.signal });
    const done = () => {
      p.settled = true;
      p.wake();
    };
    p.call.then(done, done);
    return p;
  }

  private drop(id: string, reason: Error): void {
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    clearTimeout(p.timer);
    for (const ask of p.asks.splice(0)) ask.fail(reason);
    p.aborter.abort(reason);
  }
}
