/**
 * FIFOs standing in for pipes a test controls byte by byte: a child gets `fd` (opened O_RDWR,
 * so opening never blocks and the child never sees EPIPE or end of file), the test writes
 * without blocking through `writer`, and sees a full pipe as a write refused with EAGAIN.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, constants as fsConstants, openSync, writeSync } from 'node:fs';
import { Socket } from 'node:net';
import path from 'node:path';
import { blockedWriting } from './procs.js';

export interface Fifo {
  path: string;
  /** For the child (stdin or stdout). */
  fd: number;
  /** The test's non-blocking write end. */
  writer: number;
  close(): void;
}

export function makeFifo(dir: string, name: string): Fifo {
  const file = path.join(dir, name);
  execFileSync('mkfifo', [file]);
  const fd = openSync(file, fsConstants.O_RDWR);
  const writer = openSync(file, fsConstants.O_WRONLY | fsConstants.O_NONBLOCK);
  return {
    path: file,
    fd,
    writer,
    close: () => {
      closeSync(writer);
      closeSync(fd);
    },
  };
}

/**
 * Writes `data` without blocking; false if the pipe is full (EAGAIN). Up to PIPE_BUF (4096)
 * bytes a write to a pipe is all or nothing, so a shorter `data` is never cut.
 */
export function tryWrite(fd: number, data: string | Buffer): boolean {
  const buf = typeof data === 'string' ? Buffer.from(data) : data;
  if (buf.length > 4096) throw new Error('tryWrite: more than PIPE_BUF bytes could be written in part');
  try {
    writeSync(fd, buf);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EAGAIN') return false;
    throw error;
  }
}

/**
 * A child's stdout that nobody reads is really full: a probe write of one newline is refused
 * (EAGAIN). Not only "the child is blocked writing", which a slow reader also shows for a
 * moment. Once full it stays full, since nobody reads. (The probe's newlines go into the
 * stream: only for a stdout never read.)
 */
export function unreadPipeFull(fifo: Fifo): boolean {
  return !tryWrite(fifo.writer, '\n');
}

/** The test's read end of `fifo`, as a stream (destroy it to stop reading for good). */
export function readFifo(fifo: Fifo): Socket {
  return new Socket({ fd: openSync(fifo.path, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK), readable: true, writable: false });
}

/**
 * Waits (bounded, polling: /proc and a full pipe have no event) until a child's stdout, which
 * nobody reads any more, is really full, and then until `producer` (a process whose output
 * the child forwards to that stdout) is asleep in write(2) on its fd 1: held back because
 * the stdout is full, not merely caught while its server is slow.
 */
export async function untilHeldBack(stdout: Fifo, producer: number, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const until = async (cond: () => boolean, what: string) => {
    while (!cond()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  await until(() => unreadPipeFull(stdout), 'the stdout pipe is full');
  await until(() => blockedWriting(producer, 1), 'the producer is held back');
}
