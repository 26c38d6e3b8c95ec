/**
 * A process started upstream, seen by the relay's server as a `SpawnedChild` (server/spawn.ts):
 * the upstream `ExecProcess` (tether's client: exactly-once start and writes, replayed and
 * acknowledged output) stands where a local keeper stands.
 *
 * Flow: the server's `ManagedProcess` stops reading a child when its output log's window is
 * full; here that holds the upstream process's output writes (remote-output.ts), so tether's
 * client stops acknowledging (or, against Codex, stops reading its socket) past its high-water mark.
 * Nothing queues without bound while the downstream client or the upstream link is slow.
 */
import { Writable } from 'node:stream';
import type { ExecClient, ExecProcess } from '../client/index.js';
import { type OutputStream, internalError, RpcError } from '../protocol/index.js';
import { protocolSignal } from '../protocol/signals.js';
import type { ChildEvents, ChildSpec, SpawnedChild } from '../server/backend/index.js';
import { RemoteOutput } from './remote-output.js';

/** Starts `spec` upstream; resolves once the upstream server has it, rejects with its error. */
export async function spawnRemote(client: ExecClient, spec: ChildSpec, events: ChildEvents): Promise<SpawnedChild> {
  // Followed from before the start: after a cut, tether's client may settle the start by
  // reading the process back, and its output, exit and close can come with the confirmation.
  const output = new RemoteOutput(events);
  const proc = client.spawn(spec.argv, {
    processId: spec.processId,
    cwd: spec.cwdUri ?? spec.cwd,
    env: spec.env,
    envPolicy: spec.envPolicy ?? null,
    tty: spec.tty,
    pipeStdin: spec.pipeStdin,
    ...(spec.arg0 !== undefined && spec.arg0 !== null ? { arg0: spec.arg0 } : {}),
    ...(spec.tty && spec.terminalSize ? { terminalSize: spec.terminalSize } : {}),
    stdout: output.sink(spec.tty ? 'pty' : 'stdout'),
    stderr: output.sink('stderr'),
  });
  const child = follow(proc, spec.tty, output);
  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => {
      proc.off('spawn', onSpawn);
      output.begin(false);
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
  output.begin(true);
  return child;
}

/** `proc` as the server's `SpawnedChild`: its end, exit and close reach `output` in order. */
function follow(proc: ExecProcess, tty: boolean, output: RemoteOutput): SpawnedChild {
  let closed = false;
  // In sink mode the streams stay empty and end at the upstream close (or failure).
  const streams: Array<[NodeJS.ReadableStream, OutputStream]> = [
    [proc.stdout, tty ? 'pty' : 'stdout'],
    [proc.stderr, 'stderr'],
  ];
  let open = 2;
  let upstreamClosed = false;
  const maybeClose = () => {
    if (open === 0 && upstreamClosed && !closed) {
      closed = true;
      output.event(() => output.events.close());
    }
  };
  for (const [stream, name] of streams) {
    stream.once('end', () => {
      open--;
      maybeClose();
    });
    stream.once('error', (err: Error) => output.event(() => output.events.streamError(name, err)));
  }
  // Promises, not events: whatever happened before this line is not missed.
  proc.exited.then(
    // output delivered before the exit goes first (as a local child's would)
    (code) => output.event(() => output.events.exit(code)),
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
  return {
    pid: 0,
    stdin: proc.stdin ? handOver(proc.stdin) : null,
    setReading: (reading) => output.setReading(reading),
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
