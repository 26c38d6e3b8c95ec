/**
 * Extension `binaryOutput` (issue 10 step 3): the frame codec on its own (round trips, and
 * every kind of malformed frame refused with a sentence, never a throw), then the server over
 * a raw WebSocket: handles from process/start, output as binary frames byte for byte, binary
 * acks as the flow control, and malformed, short and oversize binary frames from a client
 * answered with a clear error (or 1009) while the server carries on. A session that did not
 * negotiate the extension sees none of it.
 */
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import * as wsModule from 'ws';
import { writeBinaryOutput } from '../../../src/server/connection/binary-output.js';
import {
  BINARY_HEADER_BYTES,
  BinaryKind,
  decodeBinaryFragments,
  decodeBinaryFrame,
  encodeAckFrame,
  encodeOutputFrame,
  isTetherBinaryFrame,
  KnownExtensions,
  outputFrameHeader,
} from '../../../src/protocol/index.js';
import { startTetherServer, type TetherTarget } from '../../helpers/tether.js';
import { serverInternals } from '../../../src/server/server.js';

const MAX_SEQ = Number.MAX_SAFE_INTEGER;

describe('binary frame codec', () => {
  it('round-trips output and ack frames, seq up to 2^53 - 1 and handles up to 2^32 - 1', () => {
    for (const [handle, seq] of [[1, 1], [0xffff_ffff, MAX_SEQ], [7, 2 ** 32], [42, 2 ** 32 - 1]] as const) {
      const data = Buffer.from(`bytes for ${handle}/${seq}\0\xff`, 'latin1');
      for (const stream of ['stdout', 'stderr', 'pty'] as const) {
        const decoded = decodeBinaryFrame(encodeOutputFrame(handle, seq, stream, data));
        expect(decoded).toEqual({ ok: true, frame: { kind: 'output', handle, seq, stream, data } });
      }
      expect(decodeBinaryFrame(encodeAckFrame(handle, seq))).toEqual({ ok: true, frame: { kind: 'ack', handle, seq } });
    }
  });

  it('lays the header out as documented (version, kind, stream, flags, handle, seq, bytes)', () => {
    const frame = encodeOutputFrame(0x01020304, 2 ** 32 + 5, 'stderr', Buffer.from('hi'));
    expect([...frame]).toEqual([1, BinaryKind.output, 1, 0, 1, 2, 3, 4, 0, 0, 0, 1, 0, 0, 0, 5, 0x68, 0x69]);
    expect(encodeAckFrame(9, 3).length).toBe(BINARY_HEADER_BYTES);
  });

  it('decodes a message received as fragments (header apart, bytes in one or more pieces) without joining one piece', () => {
    const header = outputFrameHeader(3, 12, 'pty');
    const bytes = Buffer.from('the bytes');
    const one = decodeBinaryFragments([header, bytes]);
    expect(one).toEqual({ ok: true, frame: { kind: 'output', handle: 3, seq: 12, stream: 'pty', data: bytes } });
    if (one.ok && one.frame.kind === 'output') expect(one.frame.data).toBe(bytes); // the same Buffer, not a copy
    const pieces = [Buffer.from('the '), Buffer.from('bytes')];
    const several = decodeBinaryFragments([header, ...pieces]);
    expect(several).toMatchObject({ ok: true, frame: { kind: 'output', handle: 3, seq: 12, stream: 'pty', parts: pieces } });
    if (several.ok && several.frame.kind === 'output') expect(several.frame.data).toEqual(bytes); // joined on use
    const whole = encodeOutputFrame(3, 12, 'pty', bytes);
    expect(decodeBinaryFragments([whole.subarray(0, 5), whole.subarray(5)])).toEqual(one);
    expect(decodeBinaryFragments([header])).toMatchObject({ ok: false, error: 'binary output frame carries no bytes' });
    expect(isTetherBinaryFrame([header, bytes])).toBe(true);
    expect(isTetherBinaryFrame([Buffer.from('{}')])).toBe(false);
  });

  it('tells tether frames from JSON sent in binary frames by the first byte', () => {
    expect(isTetherBinaryFrame(encodeAckFrame(1, 1))).toBe(true);
    for (const json of ['{"id":1}', ' {"id":1}', '\n{}', '\t[]', '']) expect(isTetherBinaryFrame(Buffer.from(json))).toBe(false);
  });

  it('refuses malformed frames with a sentence saying what is wrong', () => {
    const ack = encodeAckFrame(5, 9);
    const output = encodeOutputFrame(5, 9, 'stdout', Buffer.from('x'));
    const patched = (base: Buffer, at: number, value: number) => {
      const copy = Buffer.from(base);
      copy[at] = value;
      return copy;
    };
    const cases: Array<[Buffer, RegExp]> = [
      [Buffer.alloc(0), /too short: 0 bytes/],
      [ack.subarray(0, 15), /too short: 15 bytes/],
      [patched(ack, 0, 2), /unsupported binary frame version 2/],
      [patched(ack, 1, 9), /unknown binary frame kind 9/],
      [patched(ack, 2, 1), /ack frame stream must be 0/],
      [patched(output, 2, 3), /unknown stream 3/],
      [patched(ack, 3, 1), /flags must be 0/],
      [patched(ack, 8, 0x20), /beyond 2\^53/],
      [encodeAckFrame(5, 9).fill(0, 4, 8), /handle must not be 0/],
      [Buffer.concat([ack, Buffer.from('extra')]), /exactly 16 bytes \(got 21\)/],
      [output.subarray(0, BINARY_HEADER_BYTES), /carries no bytes/],
      [encodeOutputFrame(5, 1, 'stdout', Buffer.from('x')).fill(0, 8, 16), /seq must be at least 1/],
    ];
    for (const [frame, message] of cases) {
      const decoded = decodeBinaryFrame(frame);
      expect(decoded.ok, message.source).toBe(false);
      if (!decoded.ok) expect(decoded.error).toMatch(message);
    }
  });

  it('never throws on arbitrary bytes, and round-trips any valid output frame (property)', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        const decoded = decodeBinaryFrame(Buffer.from(bytes));
        expect(typeof decoded.ok).toBe('boolean');
      }),
      { numRuns: 2000, seed: 3 },
    );
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 0xffff_ffff }),
        fc.integer({ min: 1, max: MAX_SEQ }),
        fc.constantFrom('stdout' as const, 'stderr' as const, 'pty' as const),
        fc.uint8Array({ minLength: 1, maxLength: 256 }),
        (handle, seq, stream, bytes) => {
          const data = Buffer.from(bytes);
          expect(decodeBinaryFrame(encodeOutputFrame(handle, seq, stream, data))).toEqual({ ok: true, frame: { kind: 'output', handle, seq, stream, data } });
        },
      ),
      { numRuns: 500, seed: 4 },
    );
  });
});

/** ws's frame parser (exported at run time, not in its types). */
const Receiver = (wsModule as unknown as { Receiver: new (options: object) => NodeJS.EventEmitter & { write(chunk: Buffer): boolean } }).Receiver;

describe('binary output written as WebSocket frames (server/binary-output.ts)', () => {
  it('is one message ws parses back to the same header and bytes, whatever the pieces, in one corked write', () => {
    for (const sizes of [[1], [125], [126], [16 * 1024], [16 * 1024 + 1], [70_000], [3, 0x1_0000, 5, 40_000], Array(64).fill(1000)]) {
      const parts = sizes.map((n, i) => Buffer.alloc(n, i + 1));
      const writes: Buffer[] = [];
      let corked = 0;
      let written = 0;
      const socket = {
        cork: () => corked++,
        uncork: () => corked--,
        write: (data: Buffer, cb?: () => void) => {
          expect(corked).toBe(1);
          writes.push(Buffer.from(data));
          cb?.();
          return true;
        },
      };
      const total = writeBinaryOutput(socket, 9, 2 ** 40 + 3, 'stderr', parts, () => written++);
      expect(written).toBe(1);
      expect(corked).toBe(0);
      const wire = Buffer.concat(writes);
      expect(total).toBe(wire.length);
      const receiver = new Receiver({ binaryType: 'fragments', isServer: false });
      const messages: Array<{ data: Buffer[]; isBinary: boolean }> = [];
      receiver.on('message', (data: Buffer[], isBinary: boolean) => messages.push({ data, isBinary }));
      receiver.on('error', (err: Error) => {
        throw err;
      });
      // Arbitrary socket reads: 64 KiB, as a client's.
      for (let at = 0; at < wire.length; at += 65_536) receiver.write(wire.subarray(at, at + 65_536));
      expect(messages).toHaveLength(1);
      expect(messages[0]!.isBinary).toBe(true);
      const decoded = decodeBinaryFragments(messages[0]!.data);
      expect(decoded.ok && decoded.frame).toMatchObject({ kind: 'output', handle: 9, seq: 2 ** 40 + 3, stream: 'stderr' });
      if (decoded.ok && decoded.frame.kind === 'output') expect(decoded.frame.data.equals(Buffer.concat(parts))).toBe(true);
    }
  });
});

/** A raw WebSocket peer that keeps text frames (parsed) and binary frames apart. */
class Peer {
  readonly texts: any[] = [];
  readonly binaries: Buffer[] = [];
  private nextId = 1;
  private waiters: Array<() => void> = [];
  readonly closed: Promise<{ code: number }>;

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data, isBinary) => {
      if (isBinary) this.binaries.push(data as Buffer);
      else this.texts.push(JSON.parse(data.toString()));
      for (const wake of this.waiters.splice(0)) wake();
    });
    this.closed = new Promise((resolve) => ws.once('close', (code) => resolve({ code })));
  }

  static async open(url: string, maxPayload?: number): Promise<Peer> {
    const ws = new WebSocket(url, { perMessageDeflate: false, ...(maxPayload ? { maxPayload } : {}) });
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    return new Peer(ws);
  }

  async until<T>(find: () => T | undefined, what: string, timeoutMs = 10_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = find();
      if (found !== undefined) return found;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 200);
      });
    }
  }

  async call(method: string, params: unknown): Promise<any> {
    const id = this.nextId++;
    this.ws.send(JSON.stringify({ id, method, params }));
    return this.until(() => this.texts.find((t) => t.id === id), `the answer to ${method}`);
  }

  async initialize(extensions: string[] | null): Promise<any> {
    const result = await this.call('initialize', { clientName: 'binary-test', ...(extensions ? { tether: { version: 1, extensions } } : {}) });
    this.ws.send(JSON.stringify({ method: 'initialized', params: {} }));
    return result;
  }

  start(processId: string, argv: string[], extra: object = {}): Promise<any> {
    return this.call('process/start', { processId, argv, cwd: 'file:///tmp', env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, tty: false, ...extra });
  }

  closedEvent(processId: string): Promise<any> {
    return this.until(() => this.texts.find((t) => t.method === 'process/closed' && t.params.processId === processId), `process/closed of ${processId}`, 30_000);
  }
}

let target: TetherTarget;

beforeAll(async () => {
  target = await startTetherServer({ maxMessageBytes: 64 * 1024, outputWindowBytes: 256 * 1024 });
});
afterAll(() => target?.stop());

describe('binaryOutput on the wire', () => {
  it('returns handles (asked for, or picked) and sends output as binary frames, byte for byte; exit and close stay JSON', async () => {
    const peer = await Peer.open(target.url);
    // Without acks (the kernel taking a frame acknowledges it, as in the Codex dialect).
    const init = await peer.initialize(KnownExtensions.filter((name) => name !== 'acks'));
    expect(init.result.tether.extensions).toContain('binaryOutput');
    const script = 'head -c 3000000 /dev/urandom > /tmp/tether-binary-test.$$; cat /tmp/tether-binary-test.$$; sha256sum < /tmp/tether-binary-test.$$ >&2; rm /tmp/tether-binary-test.$$';
    const chosen = await peer.start('p1', ['sh', '-c', script], { handle: 77 });
    expect(chosen.result).toEqual({ processId: 'p1', sandboxType: 'none', handle: 77 });
    const duplicate = await peer.start('p2', ['true'], { handle: 77 });
    expect(duplicate.error).toMatchObject({ code: -32600, message: 'handle 77 is already in use in this session' });
    const picked = await peer.start('p3', ['true']);
    expect(picked.result.handle).toEqual(expect.any(Number));
    expect(picked.result.handle).not.toBe(77);

    const closed = await peer.closedEvent('p1');
    const exited = peer.texts.find((t) => t.method === 'process/exited' && t.params.processId === 'p1');
    expect(exited.params.exitCode).toBe(0);
    expect(peer.texts.some((t) => t.method === 'process/output')).toBe(false);
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    let lastSeq = 0;
    for (const frame of peer.binaries) {
      const decoded = decodeBinaryFrame(frame);
      if (!decoded.ok || decoded.frame.kind !== 'output') throw new Error(`not an output frame: ${JSON.stringify(decoded)}`);
      if (decoded.frame.handle !== 77) continue;
      expect(decoded.frame.seq).toBeGreaterThan(lastSeq);
      lastSeq = decoded.frame.seq;
      (decoded.frame.stream === 'stderr' ? stderr : stdout).push(decoded.frame.data);
    }
    expect(exited.params.seq).toBeGreaterThan(lastSeq);
    expect(closed.params.seq).toBe(exited.params.seq + 1);
    const out = Buffer.concat(stdout);
    expect(out.length).toBe(3_000_000);
    expect(Buffer.concat(stderr).toString().split(' ')[0]).toBe(createHash('sha256').update(out).digest('hex'));
    peer.ws.close();
  });

  it('binary acks are the flow control: a window of 256 KiB passes 4 MiB only as they arrive', async () => {
    const peer = await Peer.open(target.url);
    await peer.initialize(['acks', 'binaryOutput']);
    let acked = 0;
    let bytes = 0;
    peer.ws.on('message', (data, isBinary) => {
      if (!isBinary) return;
      const decoded = decodeBinaryFrame(data as Buffer);
      if (!decoded.ok || decoded.frame.kind !== 'output') return;
      bytes += decoded.frame.data.length;
      // Acknowledge every other frame only: cumulative acks must be enough.
      if (decoded.frame.seq % 2 === 0) {
        acked = decoded.frame.seq;
        peer.ws.send(encodeAckFrame(5, acked));
      }
    });
    await peer.start('big', ['head', '-c', String(4 * 1024 * 1024), '/dev/zero'], { handle: 5 });
    const closed = await peer.closedEvent('big');
    expect(bytes).toBe(4 * 1024 * 1024);
    peer.ws.send(encodeAckFrame(5, closed.params.seq));
    // The acknowledged close frees the process at once.
    const session = [...serverInternals(target.server).sessions.values()].find((s) => s.processes.has('big'))!;
    await peer.until(() => (session.processes.get('big')?.unacknowledged === 0 ? true : undefined), 'the close acknowledged');
    peer.ws.close();
  });

  it('answers malformed binary frames with a clear error and carries on', async () => {
    const peer = await Peer.open(target.url);
    await peer.initialize(['acks', 'binaryOutput']);
    const bad: Array<[Buffer, RegExp]> = [
      [Buffer.from([1]), /invalid binary frame: binary frame too short: 1 bytes/],
      [Buffer.from([1, 2, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]), /too short: 14 bytes/],
      [Buffer.from([3, ...Buffer.alloc(15)]), /unsupported binary frame version 3/],
      [encodeOutputFrame(1, 1, 'stdout', Buffer.from('forged output')), /binary output frames go from the server to the client only/],
      [Buffer.concat([encodeAckFrame(1, 1), Buffer.alloc(100)]), /exactly 16 bytes/],
      [Buffer.from([1, 200, ...Buffer.alloc(14)]), /unknown binary frame kind 200/],
    ];
    for (const [frame] of bad) peer.ws.send(frame, { binary: true });
    // An ack for a handle nobody has is ignored, not answered.
    peer.ws.send(encodeAckFrame(999, 5), { binary: true });
    const status = await peer.call('environment/status', {});
    expect(status.result).toEqual({ status: 'ready' });
    const errors = peer.texts.filter((t) => t.error && t.id === null);
    expect(errors.map((e) => e.error.code)).toEqual(bad.map(() => -32600));
    bad.forEach(([, message], i) => expect(errors[i].error.message).toMatch(message));
    // JSON still works in binary frames.
    peer.ws.send(Buffer.from(JSON.stringify({ id: 900, method: 'environment/status', params: {} })), { binary: true });
    await peer.until(() => peer.texts.find((t) => t.id === 900), 'the answer to JSON in a binary frame');
    peer.ws.close();
  });

  it('closes the connection on an oversize binary frame (1009) and keeps serving', async () => {
    const peer = await Peer.open(target.url);
    await peer.initialize(['binaryOutput']);
    peer.ws.send(Buffer.concat([encodeAckFrame(1, 1), Buffer.alloc(64 * 1024)]), { binary: true });
    expect((await peer.closed).code).toBe(1009);
    const next = await Peer.open(target.url);
    expect((await next.initialize(['binaryOutput'])).result.sessionId).toEqual(expect.any(String));
    next.ws.close();
  });

  it('a session without the extension sees none of it: no handle, JSON output, binary frames are JSON', async () => {
    const peer = await Peer.open(target.url);
    const init = await peer.initialize(null);
    expect(init.result).not.toHaveProperty('tether');
    const started = await peer.start('plain', ['printf', 'hello'], { handle: 3 });
    expect(started.result).toEqual({ processId: 'plain', sandboxType: 'none' });
    await peer.closedEvent('plain');
    expect(peer.binaries).toEqual([]);
    const output = peer.texts.find((t) => t.method === 'process/output');
    expect(Buffer.from(output.params.chunk, 'base64').toString()).toBe('hello');
    peer.ws.send(encodeAckFrame(1, 1), { binary: true });
    const parseError = await peer.until(() => peer.texts.find((t) => t.error && t.id === null), 'a parse error');
    expect(parseError.error.code).toBe(-32700);
    peer.ws.close();
  });

  it('answers over 64 KiB go out as text frames, in every dialect: a client that fails on any binary frame reads them', async () => {
    // A Codex session (no extension) and a tether one (binaryOutput): binary frames carry only
    // the extension's output, never a JSON answer, however large.
    for (const extensions of [null, ['binaryOutput']]) {
      const peer = await Peer.open(target.url);
      const rejected: string[] = [];
      peer.ws.on('message', (data, isBinary) => {
        if (!isBinary) return;
        const decoded = decodeBinaryFrame(data as Buffer);
        if (!(decoded.ok && decoded.frame.kind === 'output')) rejected.push(`a binary frame of ${(data as Buffer).length} bytes`);
      });
      await peer.initialize(extensions);
      const script = "head -c 300000 /dev/zero | tr '\\0' a";
      await peer.start('large', ['sh', '-c', script]);
      await peer.closedEvent('large');
      const answer = await peer.call('process/read', { processId: 'large', afterSeq: 0 });
      expect(rejected).toEqual([]);
      const text = answer.result.chunks.map((c: { chunk: string }) => Buffer.from(c.chunk, 'base64').toString()).join('');
      expect(text).toBe('a'.repeat(300_000));
      expect(JSON.stringify(answer).length).toBeGreaterThan(64 * 1024);
      peer.ws.close();
    }
  });
});
