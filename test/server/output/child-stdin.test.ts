/**
 * A process's stdin from the protocol's side (child-stdin.ts), on the kept path (frames
 * answered on the keeper's `took`): a write re-sent because its answer was lost at a cut gets
 * its answer when the first one does — once the keeper took the frame — never before; and a
 * re-send after that is 'accepted' without writing twice. Pure: a PassThrough stands for the
 * keeper's stdin socket, the test plays the keeper's `took`.
 */
import type { Socket } from 'node:net';
import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { ChildStdin } from '../../../src/server/output/child-stdin.js';
import { FramedStdin } from '../../../src/server/local/keeper/kept.js';

function keptStdin(): { stdin: ChildStdin; framed: FramedStdin; frames: Buffer[] } {
  const socket = new PassThrough();
  const frames: Buffer[] = [];
  socket.on('data', (d: Buffer) => frames.push(d));
  const framed = new FramedStdin(socket as unknown as Socket);
  const stdin = new ChildStdin(false);
  stdin.attach(socket, framed);
  return { stdin, framed, frames };
}

/** One turn of the event loop: every promise that can settle now has. */
const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('kept stdin: a re-sent write', () => {
  it('is answered when the first is (the keeper took the frame), not before', async () => {
    const { stdin, framed, frames } = keptStdin();
    const order: string[] = [];
    const first = stdin.write(Buffer.from('abc'), 'w1', false, false).then((s) => order.push(`first ${s}`));
    await turn();
    // The answer was lost at a cut: the client sends the same write again.
    const again = stdin.write(Buffer.from('abc'), 'w1', false, false).then((s) => order.push(`again ${s}`));
    await turn();
    order.push('took');
    framed.took(1);
    await Promise.all([first, again]);
    expect(order).toEqual(['took', 'first accepted', 'again accepted']);
    // Written once, and a later re-send is answered at once.
    expect(Buffer.concat(frames).toString().match(/w 3 2\nw1abc/g)).toHaveLength(1);
    expect(stdin.bytesWritten).toBe(3);
    await expect(stdin.write(Buffer.from('abc'), 'w1', false, false)).resolves.toBe('accepted');
  });

  it('a closing write re-sent is accepted, and the end of input goes to the keeper once', async () => {
    const { stdin, framed, frames } = keptStdin();
    const data = stdin.write(Buffer.from('xy'), 'w1', false, false);
    framed.took(1);
    await data;
    await expect(stdin.write(Buffer.alloc(0), 'close', true, false)).resolves.toBe('accepted');
    await expect(stdin.write(Buffer.alloc(0), 'close', true, false)).resolves.toBe('accepted');
    await turn();
    expect(Buffer.concat(frames).toString().match(/eof\n/g)).toHaveLength(1);
    await expect(stdin.write(Buffer.from('late'), 'w2', false, false)).resolves.toBe('stdinClosed');
  });
});
