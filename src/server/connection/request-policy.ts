/**
 * What a connection does with a request frame before handling it: the pure rules of its
 * request gate (connection.ts does the counting and the waiting). Each waiting request holds
 * memory (a long-poll for as long as it asks, a write until the child reads): bounded in count
 * and in what its parsed frame holds, and by the server's memory budget; and every answer
 * waits for room in the send buffer, so a client that asks without reading has about the mark
 * queued for it, not one answer per request.
 *
 * No sockets, no state: the connection passes what it holds and its limits.
 */
import { ErrorCode, FsMethod, Method } from '../../protocol/index.js';
import { formatBytes } from '../../util/format.js';
import { BYTES_PER_JSON_VALUE } from './frame-cost.js';

/**
 * Methods handled without waiting for anything: they stay allowed past the in-flight limit (a
 * client with its limit of long-polls can still terminate), and take effect at once even while
 * the send buffer is over its mark. Their answers still wait for room there (`admission`
 * 'reply'): a client that asks for them faster than it reads is held back like any other.
 */
const ANSWERED_AT_ONCE: ReadonlySet<string> = new Set([
  Method.initialize,
  Method.initialized,
  Method.environmentInfo,
  Method.environmentStatus,
  Method.processSignal,
  Method.processTerminate,
  Method.sessionClose,
]);

/**
 * A request frame up to this size passes even with the server's memory budget spent: reads,
 * acknowledgements and control calls are how memory comes back, and cost next to nothing.
 * (A message being received past it is also when its connection checks its share.)
 */
export const SMALL_REQUEST_BYTES = 64 * 1024;

/**
 * Requests that wait for the send buffer to drain before they are handled (`gateAnswer`),
 * per connection; at this many the socket stops being read until it drains, so a client
 * that sends and sends without reading its answers is pushed back by TCP, not buffered.
 */
export const MAX_GATED = 64;

/**
 * Requests whose answers can be megabytes (a file, a listing, a config): they wait for one
 * of the connection's few places (answer-places.ts), each once its send buffer is below its
 * mark. So what one client can have queued for it unread is its mark plus two answers; and
 * while the budget is pressed, a read whose answer would take its session past its fair
 * share is refused (fair-share.ts `answerRefusal`). Nobody else waits for it.
 */
const LARGE_ANSWERS: ReadonlySet<string> = new Set([
  FsMethod.readFile,
  FsMethod.readBlock,
  FsMethod.readDirectory,
  FsMethod.walk,
  FsMethod.environmentConfigRead,
  Method.sessionList,
]);

/** Answered once their own answer's room was reserved (`reserveAnswer`): not held back at dispatch. */
const RESERVES_ITS_ANSWER: ReadonlySet<string> = new Set([Method.processRead]);

/** An error answer's body. */
export interface Refusal {
  code: number;
  message: string;
}

/** What a connection's requests in flight hold now, and its limits for them. */
export interface InFlight {
  /** Requests and notifications dispatched and not yet settled. */
  count: number;
  /** Bytes of their frames (a write's data is held until the child's stdin takes it). */
  bytes: number;
  maxCount: number;
  /** The largest message. */
  maxBytes: number;
}

/** Whether this method is answered at once (never refused for what is in flight, never held back). */
export function answeredAtOnce(method: string): boolean {
  return ANSWERED_AT_ONCE.has(method);
}

/**
 * Why a frame is refused unparsed, or null: its `structural` JSON values would hold many
 * times its size once parsed (a frame of millions of tiny values), more than the largest message.
 */
export function unparsedRefusal(structural: number, maxRequestBytes: number): Refusal | null {
  if (structural * BYTES_PER_JSON_VALUE <= maxRequestBytes) return null;
  return {
    code: ErrorCode.InvalidRequest,
    message:
      `message refused unparsed: its ${structural} JSON values would hold about ${formatBytes(structural * BYTES_PER_JSON_VALUE)} ` +
      `once parsed (${BYTES_PER_JSON_VALUE} bytes each), more than the server's ${formatBytes(maxRequestBytes)} message limit (--max-message-size); nothing in it was done`,
  };
}

/**
 * Why a request that is not answered at once is refused now (it would hold too much), or
 * null. `budgetRefusal` is the memory budget's reason to refuse a large request, if any.
 */
export function inFlightRefusal(held: InFlight, frameBytes: number, budgetRefusal: (what: 'large request') => string | null): Refusal | null {
  if (held.count >= held.maxCount) {
    return {
      code: ErrorCode.InvalidRequest,
      message: `too many requests in flight on this connection (at most ${held.maxCount}); wait for answers before sending more`,
    };
  }
  if (held.bytes > 0 && held.bytes + frameBytes > held.maxBytes) {
    return {
      code: ErrorCode.InvalidRequest,
      message: `too many bytes of requests in flight on this connection (at most ${held.maxBytes}, the largest message); wait for answers before sending more`,
    };
  }
  const full = frameBytes > SMALL_REQUEST_BYTES ? budgetRefusal('large request') : null;
  return full ? { code: ErrorCode.InternalError, message: full } : null;
}

/**
 * How a message admitted is dispatched: `place` waits for a large answer's place, `drain`
 * for the send buffer to drain (a request arriving while it is over its mark), `reply` is
 * handled at once but its answer waits for the drain, `now` at once. Every answer waits for
 * room, however small: a 36-byte `environment/info` is answered with 840 bytes.
 */
export type Admission = 'now' | 'drain' | 'place' | 'reply';

export function admission(kind: 'request' | 'notification', method: string, backpressured: boolean): Admission {
  if (kind !== 'request') return 'now';
  if (LARGE_ANSWERS.has(method)) return 'place';
  if (!backpressured || RESERVES_ITS_ANSWER.has(method)) return 'now';
  return ANSWERED_AT_ONCE.has(method) ? 'reply' : 'drain';
}

/** The answer to a binary frame from the client that is not an ack (only acks go that way). */
export function binaryFrameRefusal(problem: string): Refusal {
  return { code: ErrorCode.InvalidRequest, message: `invalid binary frame: ${problem}` };
}
