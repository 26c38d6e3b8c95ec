/**
 * What one `process/read` answer takes from an output log's entries (output-log.ts `read`):
 * kept output after a seq, in order, never split, up to a byte limit but at least one chunk;
 * and the answer as the protocol gives it (process.ts `read`). Pure.
 */
import type { OutputStream, ProcessReadResult } from '../../../protocol/index.js';
import { hasOutputAfter, indexAfter, type LogEntry, type OutputEntry } from './log-entries.js';

/** One chunk of a `process/read` answer (a snapshot: eviction does not empty it). */
export interface ReadChunk {
  readonly seq: number;
  readonly stream: OutputStream;
  readonly bytes: number;
  readonly data: Buffer;
}

export interface ReadAnswer {
  chunks: ReadChunk[];
  /** As `process/read` reports it (docs/protocol.md, `process/read`). */
  nextSeq: number;
}

/**
 * The output entries of `entries` (kept from `head`) with seq > `afterSeq`, at most
 * `limitBytes` but at least one, each as one Buffer (`bytesOf`: joined, or read back from the
 * spill); `truncated` when output after the last returned one was left out.
 */
export function readChunks(
  entries: readonly LogEntry[],
  head: number,
  afterSeq: number,
  limitBytes: number,
  bytesOf: (entry: OutputEntry) => Buffer,
): { chunks: ReadChunk[]; truncated: boolean } {
  const chunks: ReadChunk[] = [];
  let bytes = 0;
  for (let i = indexAfter(entries, head, afterSeq); i < entries.length; i++) {
    const e = entries[i]!;
    if (e.kind !== 'output') continue;
    if (chunks.length > 0 && bytes + e.bytes > limitBytes) return { chunks, truncated: true };
    chunks.push({ seq: e.seq, stream: e.stream, bytes: e.bytes, data: bytesOf(e) });
    bytes += e.bytes;
    if (bytes >= limitBytes) return { chunks, truncated: hasOutputAfter(entries, head, e.seq) };
  }
  return { chunks, truncated: false };
}

/** A `process/read` answer as the protocol gives it: the chunks in base64, and the process's state. */
export function processReadResult(
  { chunks, nextSeq }: ReadAnswer,
  exited: boolean,
  state: { readonly exitCode: number | null; readonly closed: boolean; readonly failure: string | null },
): ProcessReadResult {
  return {
    chunks: chunks.map((c) => ({ seq: c.seq, stream: c.stream, chunk: c.data.toString('base64') })),
    nextSeq,
    exited,
    exitCode: state.exitCode,
    closed: state.closed,
    failure: state.failure,
    sandboxDenied: false,
  };
}

/**
 * A watcher's `process/read` answer (extension `attach`, process.ts `watchRead`), `gap` told
 * when seqs right after its `afterSeq` are no longer kept. An answer cut short (maxBytes, the
 * read cap, a watcher's turn: its `nextSeq` short of the log's `next`) says nothing of the
 * end yet: its `nextSeq` is where it stopped, not the close's successor.
 */
export function watchReadResult(
  { gap, ...answer }: ReadAnswer & { gap: { first: number; last: number } | null },
  next: number,
  exited: boolean,
  state: { readonly exitCode: number | null; readonly closed: boolean; readonly failure: string | null },
): ProcessReadResult {
  const complete = answer.nextSeq >= next;
  const result = complete ? processReadResult(answer, exited, state) : processReadResult(answer, false, { exitCode: null, closed: false, failure: state.failure });
  if (gap) result.gap = { firstSeq: gap.first, lastSeq: gap.last };
  return result;
}

/**
 * What a watcher's read (extension `attach`) may return after `afterSeq`: `gap`, the seqs right
 * after it that are no longer kept (evicted history, or dropped by keep-last), and `through`,
 * the last seq of the unbroken run that follows (a later hole is told by the next read, whose
 * `afterSeq` stops before it). `nextSeq` is the log's next seq. Pure.
 */
export function watchedRun(entries: readonly LogEntry[], head: number, afterSeq: number, nextSeq: number): { gap: { first: number; last: number } | null; through: number } {
  let i = indexAfter(entries, head, afterSeq);
  let expected = afterSeq + 1;
  const firstKept = i < entries.length ? entries[i]!.seq : nextSeq;
  const gap = firstKept > expected ? { first: expected, last: firstKept - 1 } : null;
  if (gap) expected = firstKept;
  for (; i < entries.length && entries[i]!.seq === expected; i++) expected++;
  // A hole later on: the run ends before it. Else everything up to the newest seq.
  return { gap, through: i < entries.length ? expected - 1 : nextSeq - 1 };
}

/**
 * A watcher's read (output-log.ts `watch`): kept output after `afterSeq` as `readChunks` gives
 * it, at most `maxBytes` and `capBytes`, and stopping before any later hole (`nextSeq` then
 * points at it, for the next read); `gap` as `watchedRun` finds it. `nextSeq`: the log's.
 */
export function watchChunks(
  entries: readonly LogEntry[],
  head: number,
  afterSeq: number,
  nextSeq: number,
  maxBytes: number | null,
  capBytes: number,
  bytesOf: (entry: OutputEntry) => Buffer,
): ReadAnswer & { gap: { first: number; last: number } | null } {
  const { gap, through } = watchedRun(entries, head, afterSeq, nextSeq);
  const from = gap ? gap.last : afterSeq;
  const limit = Math.min(maxBytes ?? Infinity, capBytes);
  const read = readChunks(entries, head, from, limit, bytesOf);
  const chunks = read.chunks.filter((c) => c.seq <= through);
  const cut = chunks.length < read.chunks.length || through < nextSeq - 1;
  const lastReturned = chunks.length > 0 ? chunks[chunks.length - 1]!.seq : 0;
  let answerNext = nextSeq;
  if (chunks.length > 0 && (read.truncated || maxBytes !== null)) answerNext = lastReturned + 1;
  else if (cut) answerNext = through + 1;
  return { chunks, nextSeq: answerNext, gap };
}
