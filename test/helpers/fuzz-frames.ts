/**
 * Frames for the server fuzz test (test/e2e/fuzz.test.ts), from a seeded generator: valid
 * requests, the same requests mutated (a field dropped, retyped, blown up), garbage, and
 * the oracle that says which frames the server must answer, and under which id.
 *
 * Every request gets a fresh id, so "answered exactly once" can be checked per id. Nothing
 * generated here can run anything but the few harmless programs listed below: mutations
 * replace values with junk, they never write commands.
 */

import { decodeBinaryFrame, encodeAckFrame, encodeOutputFrame } from '../../src/protocol/index.js';

/** The chaos proxy's seeded PRNG (mulberry32): the same sequence for the same seed on every machine. */
export { seededRandom as prng } from '../../src/chaos/random.js';

export class Rand {
  constructor(readonly next: () => number) {}
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }
  bytes(n: number): Buffer {
    const b = Buffer.alloc(n);
    for (let i = 0; i < n; i++) b[i] = this.int(256);
    return b;
  }
}

/** What the oracle expects of one frame. */
export type Expectation =
  | { reply: 'id'; id: string | number } // exactly one reply carrying this id
  | { reply: 'null' } // exactly one reply with id null
  | { reply: 'none' }; // nothing (a notification, or a response the server ignores)

export interface FuzzFrame {
  data: string | Buffer;
  binary: boolean;
  expect: Expectation;
  /** The method when the frame is a well-formed request (for bookkeeping, e.g. started processes). */
  method?: string;
  /** The process id a `process/start` in this frame names (mutated or not): the session may own it. */
  startsProcess?: string;
  /** A long-poll that may legitimately wait until its process closes. */
  longPoll?: boolean;
  /** The frame ends the connection by design (invalid UTF-8 → 1007, oversize → 1009, session/close). */
  ends?: boolean;
}

/** Harmless programs the fuzzer runs: echoes, short producers, sleepers, a missing binary. */
export const PROGRAMS: readonly { argv: string[]; tty?: boolean; stdin?: boolean }[] = [
  { argv: ['cat'], stdin: true },
  { argv: ['cat'], tty: true },
  { argv: ['sh', '-c', 'head -c 20000 /dev/urandom | od -An -x | head -n 200'] },
  { argv: ['sh', '-c', 'echo out; echo err >&2; exit 3'] },
  { argv: ['sh', '-i'], tty: true },
  { argv: ['sleep', '0.2'] },
  { argv: ['sleep', '5'] },
  { argv: ['true'] },
  { argv: ['/nonexistent/tether-fuzz'] },
];

const WEIRD_VALUES: readonly unknown[] = [
  null,
  true,
  0,
  -1,
  1.5,
  2 ** 31,
  2 ** 53,
  -(2 ** 63),
  1e308,
  '',
  '\0',
  'x'.repeat(5000),
  'ü\u{1F600}\uFFFF',
  '../../etc/passwd',
  'file:///nonexistent/dir',
  'file:///%00',
  [],
  [1, 'two', null],
  {},
  { __proto__: { polluted: true } },
  { constructor: { prototype: { polluted: true } } },
  JSON.parse('{"__proto__": {"polluted": true}}'),
];

const GARBAGE: readonly string[] = [
  '',
  ' ',
  'null',
  '42',
  '"string"',
  '[]',
  '[{"id":1,"method":"environment/status"}]',
  '{',
  '{"id":',
  '{"id": 1, "method": "environment/status"',
  '}{',
  '{"id":1,"method":"environment/status"}{"id":2}',
  '\u0000',
  'GET / HTTP/1.1',
  '{"jsonrpc":"1.0"}',
  '[' .repeat(2000) + ']'.repeat(2000),
  '{"a":'.repeat(1000) + '1' + '}'.repeat(1000),
];

export interface SessionView {
  /** Process ids this session has started (and may not have forgotten). */
  processes: string[];
  /** Prefix for new process ids: unique per actor, so foreign ids are recognisable. */
  prefix: string;
  /** The marker this actor writes into its processes' stdin. */
  marker: string;
  /** Session ids known to this actor (to try resuming on a live connection, etc.). */
  sessionIds: string[];
}

export class FrameGenerator {
  private nextId = 1;
  private nextProcess = 1;

  constructor(
    private readonly r: Rand,
    /** Largest frame the server accepts (bigger ones close the connection with 1009). */
    private readonly maxMessageBytes: number,
    private readonly programs: readonly (typeof PROGRAMS)[number][] = PROGRAMS,
  ) {}

  private id(): string | number {
    const n = this.nextId++;
    return this.r.chance(0.2) ? `r${n}` : n;
  }

  newProcessId(view: SessionView): string {
    return `${view.prefix}p${this.nextProcess++}`;
  }

  /** A well-formed request (params valid or plausibly invalid, as a client might send). */
  validRequest(view: SessionView): { method: string; params: Record<string, unknown>; longPoll?: boolean } {
    const r = this.r;
    const known = view.processes.length ? r.pick(view.processes) : `${view.prefix}none`;
    const roll = r.int(100);
    if (roll < 6 && view.processes.length < 12) {
      const p = r.pick(this.programs);
      const processId = this.newProcessId(view);
      view.processes.push(processId); // remembered at once: the start may or may not succeed
      return {
        method: 'process/start',
        params: { processId, argv: p.argv, cwd: 'file:///tmp', env: { PATH: '/usr/bin:/bin', TERM: 'dumb' }, tty: !!p.tty, pipeStdin: !!p.stdin },
      };
    }
    if (roll < 35) {
      const text = `${view.marker}${r.bytes(r.int(64)).toString('base64')}\n`;
      return { method: 'process/write', params: { processId: known, chunk: Buffer.from(text).toString('base64'), writeId: `w${this.nextId}-${r.int(4)}` } };
    }
    if (roll < 60) {
      const waitMs = r.pick([0, 0, 10, 50, 200]);
      return {
        method: 'process/read',
        params: { processId: known, afterSeq: r.pick([0, 0, 1, 5, 1000]), maxBytes: r.pick([null, 1, 100, 65536]), waitMs },
        longPoll: waitMs > 0,
      };
    }
    if (roll < 66) return { method: 'process/signal', params: { processId: known, signal: r.pick(['interrupt', 'terminate', 'hangup', 'bogus']) } };
    if (roll < 72) return { method: 'process/terminate', params: { processId: known } };
    if (roll < 80) return { method: r.pick(['environment/info', 'environment/status']), params: {} };
    if (roll < 86) return { method: r.pick(['no/such/method', 'fs/readFile', 'process/list', 'rpc.discover', '__proto__', 'constructor']), params: {} };
    if (roll < 92) {
      // A second initialize (refused: already initialized), possibly naming another actor's session.
      const resumeSessionId = r.chance(0.5) && view.sessionIds.length ? r.pick(view.sessionIds) : undefined;
      return { method: 'initialize', params: { clientName: 'fuzz', ...(resumeSessionId ? { resumeSessionId } : {}) } };
    }
    // A process id from another session's namespace: must be unknown here.
    return { method: 'process/read', params: { processId: `a${r.int(8)}p${r.int(50)}` } };
  }

  /** One frame, of any kind, with what the server must do about it. */
  frame(view: SessionView): FuzzFrame {
    const r = this.r;
    const kind = r.int(1000);
    if (kind < 550) {
      const req = this.validRequest(view);
      const id = this.id();
      const withJsonrpc = r.chance(0.3);
      const msg = { ...(withJsonrpc ? { jsonrpc: '2.0' } : {}), id, method: req.method, params: req.params };
      return {
        data: JSON.stringify(msg),
        binary: r.chance(0.1),
        expect: { reply: 'id', id },
        method: req.method,
        longPoll: req.longPoll,
        startsProcess: req.method === 'process/start' ? (req.params.processId as string) : undefined,
      };
    }
    if (kind < 820) return this.mutated(view);
    if (kind < 900) {
      const text = r.chance(0.7) ? r.pick(GARBAGE) : r.bytes(r.int(200)).toString('latin1');
      return { data: text, binary: r.chance(0.3), expect: this.oracle(text) };
    }
    if (kind < 960) {
      const method = r.pick(['initialized', 'process/write', 'no/such/notification', 'session/close']);
      return { data: JSON.stringify({ method, params: {} }), binary: false, expect: { reply: 'none' } };
    }
    if (kind < 990) {
      // A stray response: the server sends no requests, so it ignores these.
      return { data: JSON.stringify({ id: this.id(), result: { ok: true } }), binary: false, expect: { reply: 'none' } };
    }
    if (kind < 994) return { data: Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), binary: false, expect: { reply: 'none' }, ends: true }; // invalid UTF-8 text: 1007
    if (kind < 997) {
      return { data: JSON.stringify({ id: this.id(), method: 'environment/status', params: { pad: 'x'.repeat(this.maxMessageBytes) } }), binary: false, expect: { reply: 'none' }, ends: true };
    }
    const id = this.id();
    return { data: JSON.stringify({ id, method: 'session/close', params: {} }), binary: false, expect: { reply: 'id', id }, method: 'session/close', ends: true };
  }

  /**
   * A binary frame for a session with the extension `binaryOutput`: mostly malformed (short,
   * another version, kind, stream or flag, forged output, an ack with a payload), sometimes a
   * well-formed ack for a guessed handle (ignored when not the session's own), now and then
   * bigger than the server takes (1009: ends the connection). The oracle decodes it as the
   * server must: a well-formed ack gets no answer, anything else one error with id null.
   */
  binaryFrame(): FuzzFrame {
    const r = this.r;
    const handle = r.chance(0.2) ? 0 : 1 + r.int(r.chance(0.5) ? 8 : 0xffff_ffff);
    const seq = r.int(1000);
    let data: Buffer;
    switch (r.int(6)) {
      case 0:
        data = Buffer.concat([Buffer.from([1]), r.bytes(r.int(15))]);
        break;
      case 1:
        data = encodeAckFrame(Math.max(1, handle), seq);
        break;
      case 2:
        data = encodeOutputFrame(Math.max(1, handle), seq + 1, 'stdout', Buffer.from(`forged ${r.int(100)}`));
        break;
      case 3: {
        data = encodeAckFrame(Math.max(1, handle), seq);
        data[r.int(4)] = r.int(256) & 0x07; // version, kind, stream or flags: mostly wrong
        if (r.chance(0.3)) data = Buffer.concat([data, r.bytes(1 + r.int(64))]);
        break;
      }
      case 4:
        if (r.chance(0.1)) {
          return { data: Buffer.concat([encodeAckFrame(1, 1), Buffer.alloc(this.maxMessageBytes)]), binary: true, expect: { reply: 'none' }, ends: true };
        }
        data = Buffer.concat([Buffer.from([r.int(9)]), r.bytes(r.int(40))]);
        break;
      default:
        data = Buffer.concat([Buffer.from([1, 2, 0, 0]), r.bytes(12)]);
    }
    if (data[0]! >= 0x09) data[0] = 1; // stay a tether binary frame (JSON in binary frames is covered elsewhere)
    const decoded = decodeBinaryFrame(data);
    return { data, binary: true, expect: decoded.ok && decoded.frame.kind === 'ack' ? { reply: 'none' } : { reply: 'null' } };
  }

  private mutated(view: SessionView): FuzzFrame {
    const r = this.r;
    const req = this.validRequest(view);
    const msg: Record<string, unknown> = { id: this.id(), method: req.method, params: structuredClone(req.params) };
    const params = msg.params as Record<string, unknown>;
    const keys = Object.keys(params);
    switch (r.int(9)) {
      case 0:
        if (keys.length) delete params[r.pick(keys)];
        break;
      case 1:
        if (keys.length) params[r.pick(keys)] = r.pick(WEIRD_VALUES);
        break;
      case 2:
        msg.params = r.pick(WEIRD_VALUES);
        break;
      case 3:
        msg.id = r.pick([null, 1.5, true, {}, [], '', -1, 2 ** 60]);
        break;
      case 4:
        msg.method = r.pick([null, 42, '', 'PROCESS/START', `${req.method}\0`, 'x'.repeat(3000)]);
        break;
      case 5:
        msg.jsonrpc = r.pick(['1.0', 2, null, '2.0']);
        break;
      case 6:
        if (Array.isArray(params.argv)) params.argv = [...(params.argv as string[]), r.pick(WEIRD_VALUES)];
        else params[`extra${r.int(3)}`] = r.pick(WEIRD_VALUES);
        break;
      case 7:
        if (typeof params.processId === 'string') params.processId = r.pick(['', '\0', 'x'.repeat(10_000), `${view.prefix}none`, 'a0p1']);
        break;
      default:
        delete msg.params;
    }
    // Without tty programs, a mutation must not turn one on either.
    const sent = msg.params as Record<string, unknown> | null;
    if (!this.programs.some((p) => p.tty) && sent && typeof sent === 'object' && sent.tty === true) sent.tty = false;
    const text = JSON.stringify(msg);
    return {
      data: text,
      binary: r.chance(0.1),
      expect: this.oracle(text),
      longPoll: req.longPoll || req.method === 'process/read',
      method: typeof msg.method === 'string' ? msg.method : undefined,
      startsProcess: msg.method === 'process/start' && typeof (msg.params as Record<string, unknown> | null)?.processId === 'string' ? ((msg.params as Record<string, unknown>).processId as string) : undefined,
    };
  }

  /** What docs/protocol.md ("Transport") says the server does with this text (independent of the server's code). */
  oracle(text: string): Expectation {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      return { reply: 'null' };
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return { reply: 'null' };
    const m = value as Record<string, unknown>;
    const validId = typeof m.id === 'string' || (typeof m.id === 'number' && Number.isInteger(m.id));
    const replyTo = (): Expectation => (validId ? { reply: 'id', id: m.id as string | number } : { reply: 'null' });
    if (m.jsonrpc !== undefined && m.jsonrpc !== '2.0') return replyTo();
    if (typeof m.method === 'string') {
      if (!('id' in m)) return { reply: 'none' };
      if (m.id === null) return { reply: 'null' };
      return replyTo();
    }
    if ('result' in m || 'error' in m) return { reply: 'none' };
    return replyTo();
  }
}
