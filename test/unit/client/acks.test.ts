/**
 * What the client acknowledges, and when: `ExecProcess` reports how far its consumer got, the
 * `Acknowledger` turns that into `process/ack`s (every quarter window, else within 20 ms).
 * The server stops reading a child at a window of unacknowledged output, so an ack that comes
 * late stalls the remote process: these tests hold the timers still, so every ack they see
 * was sent because enough output was consumed.
 */
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Acknowledger } from '../../../src/client/acks.js';
import { ExecProcess, type ProcessHost } from '../../../src/client/process/process.js';
import type { ProcessEvent } from '../../../src/client/sequencer.js';

const MiB = 1024 * 1024;
const WINDOW = 8 * MiB; // acks at least every 2 MiB consumed

/** A sink whose writes complete only when the test says so (a pipe whose reader is behind); Node hands it one write at a time. */
class HeldSink extends Writable {
  readonly pending: Array<() => void> = [];
  constructor() {
    super({ highWaterMark: 64 * 1024 });
  }
  override _write(_chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    this.pending.push(callback);
  }
  /** Completes the write in progress; Node runs its callback (and starts the next write) within a tick. */
  async completeOne(): Promise<void> {
    this.pending.shift()!();
    await ticks();
  }
}

const ticks = async (): Promise<void> => {
  for (let i = 0; i < 3; i++) await new Promise<void>((resolve) => process.nextTick(resolve));
};

function setup(sink?: HeldSink) {
  const acks: number[] = [];
  const reports: Array<{ seq: number; bytes: number }> = [];
  const acknowledger = new Acknowledger((_id, seq) => {
    acks.push(seq);
    return true;
  }, WINDOW);
  const host = {
    consumed: (proc: ExecProcess, seq: number, bytes: number, final: boolean) => {
      reports.push({ seq, bytes });
      acknowledger.consumed(proc.id, seq, bytes, final);
    },
    outputBuffered: () => {},
    outputWanted: () => {},
    fillHole: () => {},
  } as unknown as ProcessHost;
  const proc = new ExecProcess('p1', ['producer'], { tty: false, pipeStdin: false, stdoutSink: sink }, host);
  proc.markStarted();
  return { proc, acks, reports, acknowledger };
}

const output = (seq: number, bytes: number): ProcessEvent => ({ type: 'output', seq, stream: 'stdout', data: Buffer.alloc(bytes, seq) });

describe('acknowledging what the consumer took', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('a sink behind its deliveries acks a quarter window at a time as its writes complete, not by timer', async () => {
    const sink = new HeldSink();
    const { proc, acks, reports, acknowledger } = setup(sink);
    // A window's worth delivered at once, none of it written yet: nothing is consumed.
    for (let seq = 1; seq <= 8; seq++) proc.accept(output(seq, MiB));
    await ticks();
    expect(sink.writableLength).toBe(8 * MiB);
    expect(reports).toEqual([]);
    // The reader catches up one write at a time; the clock does not move.
    for (let i = 0; i < 8; i++) await sink.completeOne();
    // Every report covers exactly the bytes of the events it newly covers…
    expect(reports).toEqual([1, 2, 3, 4, 5, 6, 7, 8].map((seq) => ({ seq, bytes: MiB })));
    // …so an ack goes at every 2 MiB consumed: the server's window reopens as the reader goes.
    expect(acks).toEqual([2, 4, 6, 8]);
    acknowledger.dispose();
  });

  it('reports each byte once, whatever order deliveries and completions interleave in', async () => {
    const sink = new HeldSink();
    const { proc, reports, acknowledger } = setup(sink);
    const sizes = [5000, 70_000, 1, 300_000, 4096, 65_536, 123_457, 9];
    let delivered = 0;
    for (let seq = 1; seq <= sizes.length; seq++) {
      proc.accept(output(seq, sizes[seq - 1]!));
      delivered += sizes[seq - 1]!;
      // Complete a write after every other delivery; the rest at the end.
      if (seq % 2 === 0) await sink.completeOne();
    }
    while (sink.pending.length > 0) await sink.completeOne();
    expect(reports.reduce((sum, r) => sum + r.bytes, 0)).toBe(delivered);
    let previous = 0;
    for (const { seq, bytes } of reports) {
      expect(bytes).toBe(sizes.slice(previous, seq).reduce((a, b) => a + b, 0));
      previous = seq;
    }
    acknowledger.dispose();
  });

  it('a Readable that is read late reports its bytes when read, not when they arrived', async () => {
    const { proc, acks, reports, acknowledger } = setup();
    // Past the stream's high-water mark: the consumer is behind, nothing counts as taken.
    for (let seq = 1; seq <= 4; seq++) proc.accept(output(seq, MiB));
    const takenEarly = reports.reduce((sum, r) => sum + r.bytes, 0);
    expect(takenEarly).toBeLessThan(4 * MiB);
    proc.stdout.resume();
    await vi.advanceTimersByTimeAsync(0);
    expect(reports.reduce((sum, r) => sum + r.bytes, 0)).toBe(4 * MiB);
    expect(acks.at(-1)).toBe(4);
    acknowledger.dispose();
  });
});
