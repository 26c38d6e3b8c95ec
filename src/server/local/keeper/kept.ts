/**
 * Kept mode on the server's side of a keeper (restart adoption; keeper.ts is the keeper's lifecycle):
 *
 * - `FramedStdin`: every write goes to the keeper as a frame carrying its writeId
 *   (wire.ts `encodeStdinFrame`) and is answered once the keeper reports (`took <N>`)
 *   that it took that frame whole — the keeper, not the server, remembers which writeIds were
 *   applied, so a successor adopting it knows too. Frames are numbered as the keeper counts
 *   them: cumulative for the process's whole life, eof included.
 * - `KeptControl`: what the server tells a kept keeper besides signals (mark, drop, release)
 *   and the hand-over at a kept stop.
 * - `connectAdoption`: a successor's side of an adoption (descriptors, then the dump).
 */
import { Socket } from 'node:net';
import { adoptedChannels, type KeeperChannels } from './launch.js';
import { dropMessage, DumpReader, encodeStdinFrame, markMessage, RELEASE_MESSAGE, STDIN_EOF, type KeeperDump } from './wire.js';
import { nativeAddon } from '../../native/index.js';
import { receiveFds } from './receive-fds.js';

export class FramedStdin {
  /** Frames sent so far (the keeper's numbering: an adopted one continues from what it took). */
  private sent: number;
  private taken: number;
  private readonly waiters: { frame: number; resolve: () => void }[] = [];
  private ended: boolean;

  constructor(
    private readonly socket: Socket,
    taken = 0,
    eofSent = false,
  ) {
    this.sent = this.taken = taken;
    this.ended = eofSent;
    socket.once('close', () => this.abandon());
  }

  /** The command's stdin was closed (eof sent, now or by a predecessor). */
  get closed(): boolean {
    return this.ended;
  }

  /** Sends one frame; resolves once the keeper took it (or can take nothing more). */
  write(data: Buffer, writeId: string): Promise<void> {
    if (this.ended || this.socket.destroyed || !this.socket.writable) return Promise.resolve();
    this.socket.write(encodeStdinFrame(data, writeId));
    const frame = ++this.sent;
    return new Promise((resolve) => this.waiters.push({ frame, resolve }));
  }

  /** Closes the command's stdin (after the frames sent before). */
  end(): void {
    if (this.ended) return;
    this.ended = true;
    if (this.socket.destroyed || !this.socket.writable) return;
    this.socket.write(STDIN_EOF);
    this.sent++;
  }

  /** The keeper's `took <count>`: every frame up to `count` is taken. */
  took(count: number): void {
    if (count <= this.taken) return;
    this.taken = count;
    while (this.waiters.length > 0 && this.waiters[0]!.frame <= count) this.waiters.shift()!.resolve();
  }

  /** The keeper is gone: nothing more will be taken; answer every waiting write (as a pipe's error would). */
  abandon(): void {
    for (const waiter of this.waiters.splice(0)) waiter.resolve();
  }

  /**
   * The server lets go of the keeper to hand it over (a kept stop): the waiting writes stay
   * unanswered — their clients re-send them to the successor, which learns from the keeper
   * whether each was taken (writeIds), so none is lost or applied twice.
   */
  forget(): void {
    this.waiters.length = 0;
  }
}

/** What the server tells a kept keeper besides signals, and the hand-over at a kept stop. */
export class KeptControl {
  /** Told `release`: a control EOF now kills the tree, as without keep. */
  released = false;
  /** The server let go of the keeper on purpose (a kept stop): its control EOF is not a death. */
  handedOver = false;

  constructor(
    /** The Unix socket the keeper listens on for an adopter. */
    readonly socketPath: string,
    private readonly send: (line: string) => boolean,
    private readonly stdin: FramedStdin | null,
    private readonly sockets: readonly (Socket | undefined)[],
  ) {}

  /** The server's output entry `seq` covers `stream` (1 stdout or the terminal, 2 stderr) up to `end`; sent before it is exposed. */
  mark(seq: number, stream: 1 | 2, end: number): void {
    this.send(markMessage(seq, stream, end));
  }

  /** The exit ('x') or close ('c') event has seq `seq`. */
  markEvent(seq: number, event: 'x' | 'c'): void {
    this.send(markMessage(seq, event));
  }

  /** The server keeps no entry <= `seq` any more. */
  drop(seq: number): void {
    this.send(dropMessage(seq));
  }

  /** The server is done with this process for good (the keeper then ends as without keep). */
  release(): void {
    if (this.released) return;
    this.released = true;
    this.send(RELEASE_MESSAGE);
  }

  /**
   * The server stops to hand over: lets go of every channel without killing anything; the
   * keeper waits for an adopter (its adopt timer). Waiting writes stay unanswered.
   */
  handOver(): void {
    if (this.released) return;
    this.handedOver = true;
    this.stdin?.forget();
    for (const socket of this.sockets) socket?.destroy();
  }
}

/**
 * Connects to the kept keeper at `socketPath` and receives its channels (control socket, then
 * stdin/stdout/stderr by SCM_RIGHTS, output paused) and its dump, within `timeoutMs` in all
 * (the descriptors are waited for off the main thread: receive-fds.ts, so several adoptions
 * run at once). A dump over `maxDumpBytes` is refused as it arrives, never held.
 */
export async function connectAdoption(
  socketPath: string,
  timeoutMs: number,
  maxDumpBytes?: number,
): Promise<{ channels: Omit<KeeperChannels, 'start'>; dump: KeeperDump; rest: Buffer }> {
  const deadline = Date.now() + timeoutMs;
  const { socket: fd, fds } = await receiveFds(socketPath, timeoutMs);
  const control = new Socket({ fd, readable: true, writable: true });
  if (fds.length < 3) {
    for (const extra of fds) nativeAddon().closeFd(extra);
    control.destroy();
    throw new Error(`keeper ${socketPath} passed ${fds.length} descriptors, not 3`);
  }
  for (const extra of fds.slice(3)) nativeAddon().closeFd(extra);
  const channels = adoptedChannels(control, { stdin: fds[0]!, stdout: fds[1]!, stderr: fds[2]! });
  // Not read until the caller says so (spawn.ts): as for a spawned keeper.
  channels.stdout.pause();
  channels.stderr.pause();
  try {
    const { dump, rest } = await readDump(control, Math.max(1, deadline - Date.now()), socketPath, maxDumpBytes);
    return { channels, dump, rest };
  } catch (err) {
    for (const socket of [channels.stdin, channels.stdout, channels.stderr, control]) socket.destroy();
    throw err;
  }
}

/** Reads a kept keeper's adoption dump from `control` (Buffers), within `timeoutMs`; leaves it paused. */
function readDump(control: Socket, timeoutMs: number, socketPath: string, maxDumpBytes: number | undefined): Promise<{ dump: KeeperDump; rest: Buffer }> {
  return new Promise((resolve, reject) => {
    const reader = new DumpReader(maxDumpBytes);
    const finish = (err: Error | null, done?: { dump: KeeperDump; rest: Buffer }) => {
      clearTimeout(timer);
      control.off('data', onData);
      control.off('close', onClose);
      control.off('error', onError);
      control.pause();
      if (err) reject(err);
      else resolve(done!);
    };
    const onData = (chunk: Buffer) => {
      try {
        const done = reader.push(chunk);
        if (done) finish(null, done);
      } catch (err) {
        finish(new Error(`keeper ${socketPath}: ${(err as Error).message}`));
      }
    };
    const onClose = () => finish(new Error(`keeper ${socketPath} closed the connection before its dump ended`));
    const onError = (err: Error) => finish(new Error(`keeper ${socketPath}: ${err.message}`));
    const timer = setTimeout(() => finish(new Error(`keeper ${socketPath} did not finish its dump within ${timeoutMs} ms`)), timeoutMs);
    control.on('data', onData);
    control.once('close', onClose);
    control.on('error', onError);
  });
}
