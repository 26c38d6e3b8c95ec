/**
 * The output side of a relayed process (src/relay/remote-output.ts): the sinks tether's client
 * writes to complete a write only once its bytes were passed on, hold writes while the server
 * does not read (so the client stops acknowledging), keep an exit behind held output, and keep
 * no reference to a chunk once its write completed. Pure.
 */
import { describe, expect, it } from 'vitest';
import { ProcessOutput } from '../../../src/client/process/process-output.js';
import type { ChildEvents } from '../../../src/server/backend/backend.js';
import { RemoteOutput } from '../../../src/relay/remote-output.js';

const immediate = () => new Promise<void>((resolve) => setImmediate(resolve));

function output() {
  const got: string[] = [];
  let onOutput: (() => void) | undefined;
  const events: ChildEvents = {
    output: (stream, data) => {
      got.push(`${stream}:${data.toString()}`);
      onOutput?.();
    },
    exit: (code) => got.push(`exit:${code}`),
    close: () => got.push('close'),
    streamError: (stream, err) => got.push(`error:${stream}:${err.message}`),
  };
  const out = new RemoteOutput(events);
  return { out, got, setOnOutput: (f: () => void) => (onOutput = f) };
}

async function begun() {
  const o = output();
  o.out.begin(true);
  await immediate();
  return o;
}

describe('RemoteOutput', () => {
  it('passes a write on and completes it at once while the server reads', async () => {
    const { out, got } = await begun();
    out.setReading(true);
    const stdout = out.sink('stdout');
    let written = false;
    stdout.write(Buffer.from('hello'), () => (written = true));
    expect(written).toBe(true);
    out.event(() => out.events.exit(0));
    expect(got).toEqual(['stdout:hello', 'exit:0']);
  });

  it('holds writes (not completed) while the server does not read, and the exit behind them', async () => {
    const { out, got } = await begun();
    const stdout = out.sink('stdout');
    const stderr = out.sink('stderr');
    const done: string[] = [];
    stdout.write(Buffer.from('a'), () => done.push('a'));
    stderr.write(Buffer.from('b'), () => done.push('b'));
    out.event(() => out.events.exit(3));
    stdout.write(Buffer.from('c'), () => done.push('c'));
    expect(done).toEqual([]);
    expect(stdout.writableLength).toBe(2); // what flow.ts sees held (a Codex upstream's socket pauses past its mark)
    expect(got).toEqual([]);
    out.setReading(true);
    expect(done).toEqual(['a', 'b', 'c']);
    await immediate();
    expect(got).toEqual(['stdout:a', 'stderr:b', 'exit:3', 'stdout:c']);
    expect(stdout.writableLength).toBe(0);
  });

  it('stops passing held output on as soon as the server stops reading again (its window filled)', async () => {
    const { out, got, setOnOutput } = await begun();
    const stdout = out.sink('stdout');
    const done: string[] = [];
    for (const part of ['1', '2', '3']) stdout.write(Buffer.alloc(64 * 1024, part), () => done.push(part));
    setOnOutput(() => out.setReading(false));
    out.setReading(true);
    expect(done).toEqual(['1']);
    expect(got).toHaveLength(1);
  });

  it('keeps no reference to a chunk once its write completed (tether\'s client reuses that memory)', async () => {
    const { out, got } = await begun();
    out.setReading(true);
    const stdout = out.sink('stdout');
    const reused = Buffer.from('xy');
    stdout.write(reused, () => reused.fill('z'));
    stdout.write(reused, () => {});
    await immediate();
    expect(got).toEqual(['stdout:xyzz']);
  });

  it('copies what comes before the start is confirmed, and drops everything if it never started', async () => {
    const { out, got } = output();
    out.setReading(true);
    const reused = Buffer.from('early');
    out.sink('stdout').write(reused, () => {});
    await new Promise<void>((resolve) => process.nextTick(resolve));
    reused.fill('!');
    out.begin(true);
    await immediate();
    expect(got).toEqual(['stdout:early']);
    const never = output();
    never.out.setReading(true);
    never.out.sink('stdout').write(Buffer.from('x'), () => {});
    never.out.event(() => never.out.events.close());
    never.out.begin(false);
    await immediate();
    expect(never.got).toEqual([]);
  });

  it('is a sink tether\'s client may copy binary output into reused memory for (done with once written)', () => {
    const { out } = output();
    const owner = { outputBuffered() {}, outputWanted() {}, consumed() {} };
    const po = new ProcessOutput({ stdoutSink: out.sink('stdout') }, {} as never, owner);
    expect(po.memoryFor('stdout')).not.toBeNull();
    expect(po.memoryFor('stderr')).toBeNull(); // a Readable's reader keeps its chunks: owned Buffers
  });
});
