/**
 * The HTTP work of `http/request` (http-request.ts keeps the params, caps, timeouts' policy and
 * the body's delivery): what one request asks of a back-end, and what it gets back. The local
 * back-end's way of doing it is local/http-send.ts.
 */
import type { RequestTimeouts } from './http-timeouts.js';

export interface HttpRequestWork {
  method: string;
  url: URL;
  headers: Array<{ name: string; value: string }>;
  body: Buffer | undefined;
  /** Follow redirects (at most 10, as reqwest does). */
  follow: boolean;
  /** Aborts the request and its body (timeout, connection closed). */
  signal: AbortSignal;
  /** Connect and idle clocks; told of activity. */
  deadlines: RequestTimeouts;
  /** The caller's `timeoutMs`, for a back-end that forwards it. */
  timeoutMs?: number | null;
}

/** A response whose headers are in; its body is iterated (once) or destroyed. */
export interface HttpResponseLike extends AsyncIterable<Buffer> {
  readonly status: number;
  /** In arrival order, names in lower case. */
  readonly headers: Array<{ name: string; value: string }>;
  /** The announced Content-Length, if any. */
  readonly contentLength: number | undefined;
  destroy(): void;
}
