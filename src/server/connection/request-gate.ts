/**
 * A connection's request gate: counts its requests in flight (how many, and the bytes of
 * their frames), refuses those that would hold too much (request-policy.ts says why), and
 * holds back those that must wait — for the send buffer to drain, or for one of the few
 * places of large answers (answer-places.ts) — pausing the socket's reading while
 * `MAX_GATED` wait, so a client that sends without reading is pushed back by TCP.
 *
 * No sockets: the connection says whether it is closed or backpressured, and pauses reading.
 */
import { AnswerPlaces, type AnswerLink } from './answer-places.js';
import { answeredAtOnce, inFlightRefusal, MAX_GATED, type Admission, type Refusal } from './request-policy.js';

/** What the gate needs of its connection. */
export interface GateLink extends AnswerLink {
  /** Past this many in flight, new requests are refused at once. */
  readonly maxInflight: number;
  /** Past this many bytes in flight, new requests are refused at once (the largest message). */
  readonly maxRequestBytes: number;
  pauseReading(reason: string): void;
  resumeReading(reason: string): void;
}

export class RequestGate {
  /** Requests and notifications dispatched and not yet settled. */
  private inflight = 0;
  /** Bytes of the frames of requests dispatched and not yet settled. */
  private requestBytes = 0;
  /** Requests held back until the send buffer drains or a place is free (see MAX_GATED). */
  private gated = 0;
  /** Large-answer requests being handled, and those waiting for one of the places. */
  private readonly places: AnswerPlaces;

  constructor(
    private readonly link: GateLink,
    /** The memory budget is pressed now. */
    pressed: () => boolean,
  ) {
    this.places = new AnswerPlaces(link, pressed);
  }

  /** Bytes held by requests in flight (their frames). */
  get bytes(): number {
    return this.requestBytes;
  }

  /** Why this message is refused now, or null (never for those answered at once). */
  refusal(method: string, frameBytes: number, budgetRefusal: (what: 'large request') => string | null): Refusal | null {
    if (answeredAtOnce(method)) return null;
    const held = { count: this.inflight, bytes: this.requestBytes, maxCount: this.link.maxInflight, maxBytes: this.link.maxRequestBytes };
    return inFlightRefusal(held, frameBytes, budgetRefusal);
  }

  /** A message of `frameBytes` is dispatched (it will `leave` once settled). */
  enter(frameBytes: number): void {
    this.inflight++;
    this.requestBytes += frameBytes;
  }

  leave(frameBytes: number): void {
    this.inflight--;
    this.requestBytes -= frameBytes;
  }

  /**
   * Waits as `how` says (the send buffer drained, or a large answer's place taken); false
   * when the socket closed meanwhile (the request is dropped unanswered, undone). A place
   * taken is given back with `placeDone`.
   */
  async wait(how: Exclude<Admission, 'now' | 'reply'>): Promise<boolean> {
    if (++this.gated === MAX_GATED) this.link.pauseReading('gated');
    try {
      if (how === 'place') return await this.places.take();
      await this.link.whenDrained();
      return !this.link.closed;
    } finally {
      if (this.gated-- === MAX_GATED) this.link.resumeReading('gated');
    }
  }

  /** A large answer's place is free again (its answer was handed to the socket, or failed). */
  placeDone(): void {
    this.places.give();
  }

  /** The connection closed: everything waiting for a place gives up. */
  close(): void {
    this.places.closeAll();
  }
}
