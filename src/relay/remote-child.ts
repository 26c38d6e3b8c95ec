/**
 * A process started upstream, seen by the relay's server as a `SpawnedChild` (server/spawn.ts):
 * the upstream `ExecProcess` (tether's client: exactly-once start and writes, replayed and
 * acknowledged output) stands where a local keeper stands.
 *
 * Flow: the server's `ManagedProcess` stops reading a child when its output log's window is
 * full; here that pauses the upstream process's streams, so tether's client stops
 * acknowledging (or, against Codex, stops reading its socket) past its high-water mark.
 * Nothing queues without bound while the downstream client or the upstream link is slow.
 */
import { Writable } from 'node:stream';
import type { ExecClient, ExecProcess } from '../client/index.js';
import type { OutputStream } from '../protocol/index.js';
import { internalError, RpcError } from '../protocol/index.js';
import { protocolSignal } from '../protocol/signals.js';
import type { ChildEvents, ChildSpec, SpawnedChild } from '../server/backend.js';
import { OutputBatch } from './output-batch.js';

/** Starts `spec` upstream; resolves once the upstream server has it, rejects with its error. */
export async function spawnRemote(client: ExecClient, spec: ChildSpec, events: ChildEvents): Promise<SpawnedChild> {
  const proc = client.spawn(spec.argv, {
    processId: spec.processId,
    cwd: spec.cwdUri ?? spec.cwd,
    env: spec.env,
    envPolicy: spec.envPolicy ?? null,
    tty: spec.tty,
    pipeStdin: spec.pipeStdin,
    ...(spec.arg0 !== undefined && spec.arg0 !== null ? { arg0: spec.arg0 } : {}),
    ...(spec.tty && spec.terminalSize ? { terminalSize: spec.terminalSize } : {}),
  });
  // Paused until the server says to read (ManagedProcess.updateFlow), like a local child.
  proc.stdout.pause();
  proc.stderr.pause();
  // Followed from now: after a cut, tether's client may settle the start by reading the
  // process back, and its output, exit and close can come with the confirmation.
  const child = follow(proc, spec.tty, events);
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => {
      proc.off('spawn', onSpawn);
      child.begin(false);
      // The upstream server's refusal is the answer (its code, its text); anything else is -32603.
      reject(err instanceof RpcError ? err : internalError(err.message));
    };
    const onSpawn = () => {
      proc.off('error', onError);
      resolve();
    };
    proc.once('spawn', onSpawn);
    proc.once('error', onError);
  });
  child.begin(true);
  return child.spawned;
}

/**
 * Follows `proc` from before its start is confirmed: its events are held until `begin(true)`,
 * then delivered after the microtasks that follow the resolution (as spawn.ts does), or
 * dropped with `begin(false)` (it never started).
 */
function follow(proc: ExecProcess, tty: boolean, events: ChildEvents): { spawned: SpawnedChild; begin(started: boolean): void } {
  let closed = false;
  let begun = false;
  let dropped = false;
  const held: Array<() => void> = [];
  const whenBegun = (event: () => void) => {
    if (dropped) return;
    if (begun) event();
    else held.push(event);
  };
  const begin = (started: boolean) => {
    if (!started) {
      dropped = true;
      held.length = 0;
      return;
    }
    setImmediate(() => {
      begun = true;
      for (const event of held.splice(0)) event();
    });
  };
  const streams: Array<[NodeJS.ReadableStream & { pause(): unknown; resume(): unknown }, OutputStream]> = [
    [proc.stdout, tty ? 'pty' : 'stdout'],
    [proc.stderr, 'stderr'],
  ];
  let open = 2;
  let upstreamClosed = false;
  const maybeClose = () => {
    if (open === 0 && upstreamClosed && !closed) {
      closed = true;
      whenBegun(() => events.close());
    }
  };
  const batch = new OutputBatch((name, data) => whenBegun(() => events.output(name, data)));
  for (const [stream, name] of streams) {
    stream.on('data', (data: Buffer) => batch.add(name, data));
    stream.once('end', () => {
      batch.flush();
      open--;
      maybeClose();
    });
    stream.once('error', (err: Error) => {
      batch.flush();
      whenBegun(() => events.streamError(name, err));
    });
  }
  // Promises, not events: whatever happened before this line is not missed.
  proc.exited.then(
    (code) => {
      batch.flush(); // output delivered before the exit goes first (as a local child's would)
      whenBegun(() => events.exit(code));
    },
    () => {},
  );
  const gone = proc.closed.then(
    () => {
      upstreamClosed = true;
      maybeClose();
    },
    () => {},
  );
  proc.on('error', () => {}); // reported through the streams and the session's lost hook
  const spawned: SpawnedChild = {
    pid: 0,
    stdin: proc.stdin ? handOver(proc.stdin) : null,
    setReading(reading) {
      for (const [stream] of streams) {
        if (reading) stream.resume();
        else stream.pause();
      }
    },
    signal(signal) {
      const name = protocolSignal(signal);
      if (name) void proc.signal(name).catch(() => {});
    },
    killTree: () => void proc.terminate().catch(() => {}),
    killTreeSync: () => void proc.terminate().catch(() => {}),
    resize: (cols, rows) => void (tty ? proc.resize(cols, rows).catch(() => {}) : undefined),
    get alive() {
      return !closed;
    },
    whenGone: gone,
  };
  return { spawned, begin };
}

/**
 * The server answers a `process/write` once its child's stdin took the bytes. Here the
 * upstream process's stdin takes them: tether's client delivers them exactly once while the
 * session lives (re-sent with their writeId after a cut), so a write is answered as soon as
 * it is handed over below that stream's high-water mark (64 KiB), and waits for its drain
 * above it — input held for a process stays bounded, and a write does not wait a round trip.
 */
function handOver(upstream: Writable): Writable {
  const stdin = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      if (upstream.write(chunk)) callback();
      else upstream.once('drain', () => callback());
    },
    final(callback) {
      upstream.end(() => callback());
    },
  });
  upstream.once('error', (err) => stdin.destroy(err));
  upstream.once('close', () => stdin.destroy());
  return stdin;
}
