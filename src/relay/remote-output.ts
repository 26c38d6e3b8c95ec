/**
 * The output side of a process started upstream (remote-child.ts): the sinks tether's client
 * writes its output to, and the order in which output, exit and close reach the server.
 * Pure (no sockets): test/unit/relay/remote-output.test.ts.
 */
import { Writable } from 'node:stream';
import { doneWhenWritten } from '../client/process/process-output.js';
import type { OutputStream } from '../protocol/index.js';
import type { ChildEvents } from '../server/backend/index.js';
import { OutputBatch } from './output-batch.js';

/**
 * The upstream process's events on their way to the server's `ChildEvents`, in order.
 *
 * Output comes through two sinks given to the upstream `spawn` (not its Readable streams: no
 * stream machinery, and tether's client may copy binary output into reused memory, since a
 * sink's chunk is done with once its write completed). A write completes once its bytes were
 * passed on (the server's log copies them) — or, while the server does not read (its log's
 * window is full: `setReading(false)`), once it reads again: until then the write is held, so
 * tether's client stops acknowledging (or, against Codex, stops reading its socket) past its
 * high-water mark, as it would for a Readable nobody reads.
 *
 * Events are held until `begin(true)`, then delivered after the microtasks that follow the
 * resolution (as spawn.ts does), or dropped with `begin(false)` (it never started). An exit
 * or close waits behind held output.
 */
export class RemoteOutput {
  private begun = false;
  private dropped = false;
  private reading = false;
  /** Before `begin`: events, with their output copied. */
  private readonly early: Array<() => void> = [];
  /** While not reading: output writes (their chunk valid until their callback) and what came after them. */
  private readonly held: Array<() => void> = [];
  private readonly batch: OutputBatch;

  constructor(readonly events: ChildEvents) {
    this.batch = new OutputBatch((stream, data) => {
      if (this.begun) this.events.output(stream, data);
      else if (!this.dropped) {
        const copy = Buffer.from(data); // `data` is valid only now
        this.early.push(() => this.events.output(stream, copy));
      }
    });
  }

  /** The destination of one upstream stream (see `RelaySink`); its `writableLength` is what it holds. */
  sink(stream: OutputStream): Writable {
    let heldBytes = 0;
    return new RelaySink((chunk, written) => {
      if (this.reading && this.held.length === 0) {
        this.batch.add(stream, chunk);
        written?.();
        return;
      }
      heldBytes += chunk.length;
      this.held.push(() => {
        heldBytes -= chunk.length;
        this.batch.add(stream, chunk);
        written?.();
      });
    }, () => heldBytes);
  }

  /** An exit, close or stream error: after all output taken before it. */
  event(event: () => void): void {
    if (this.dropped) return;
    if (this.held.length > 0) {
      this.held.push(() => {
        this.batch.flush();
        this.whenBegun(event);
      });
      return;
    }
    this.batch.flush();
    this.whenBegun(event);
  }

  setReading(reading: boolean): void {
    this.reading = reading;
    // Passing on held output may make the server stop reading again (its window filled).
    while (this.reading && this.held.length > 0) this.held.shift()!();
  }

  begin(started: boolean): void {
    if (!started) {
      this.dropped = true;
      this.early.length = 0;
      this.held.length = 0;
      return;
    }
    setImmediate(() => {
      this.begun = true;
      for (const event of this.early.splice(0)) event();
    });
  }

  private whenBegun(event: () => void): void {
    if (this.dropped) return;
    if (this.begun) event();
    else this.early.push(event);
  }
}

/**
 * A sink for tether's client (ProcessOutput.write: `cork`, `write`s, the last with a
 * callback, `uncork`; flow.ts: `writableLength`) that hands each write to `take` at once and
 * in order — no stream buffering of its own, so an exit queued behind held output cannot
 * overtake writes a Writable would still buffer. `take` calls `written` once done with the chunk.
 */
class RelaySink extends Writable {
  constructor(
    private readonly take: (chunk: Buffer, written: (() => void) | undefined) => void,
    heldBytes: () => number,
  ) {
    super();
    (this as unknown as Record<symbol, boolean>)[doneWhenWritten] = true;
    Object.defineProperty(this, 'writableLength', { get: heldBytes });
  }

  override write(chunk: unknown, encoding?: unknown, callback?: unknown): boolean {
    const done = typeof encoding === 'function' ? encoding : callback;
    this.take(chunk as Buffer, typeof done === 'function' ? () => (done as () => void)() : undefined);
    return true;
  }

  override cork(): void {}
  override uncork(): void {}
}

