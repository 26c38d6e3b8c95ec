/**
 * One WebSocket connection: decodes frames in the Codex dialect, dispatches requests through
 * the shared `json-rpc-2.0` server WITHOUT awaiting one before the next (a long-poll read
 * never delays a write), answers in the client's dialect, tracks the handshake state, and
 * sends the attached session's events (`sendEntry`), telling the session when its send
 * buffer has room again.
 *
 * It coordinates; each job is its own module: the request gate's rules (request-policy.ts)
 * and its counting and waiting (request-gate.ts, answer-places.ts), the send buffer against
 * its marks (send-buffer.ts), what it holds in the memory budget and its session's share
 * (held-memory.ts), why its socket is not read (read-pause.ts), messages being received
 * (receive-meter.ts), whether the peer is there (liveness.ts), the session's events as
 * frames (event-frames.ts, binary-output.ts), and what a frame costs unparsed (frame-cost.ts).
 */
import { setMaxListeners } from 'node:events';
import type { Socket } from 'node:net';
import type WebSocket from 'ws';
import type { JSONRPCServer } from 'json-rpc-2.0';
import {
  binaryPayload,
  decodeBinaryFrame,
  decodeFrame,
  Dialect,
  isTetherBinaryFrame,
  Method,
  type SessionEndedNotification,
  withJsonrpc,
} from '../../protocol/index.js';
import { eventFrame, writeBinaryEntry, type FramedProcess } from './event-frames.js';
import { frameCost } from './frame-cost.js';
import { HeldMemory } from './held-memory.js';
import { Liveness } from './liveness.js';
import { ReadPause } from './read-pause.js';
import { RequestGate } from './request-gate.js';
import { admission, binaryFrameRefusal, SMALL_REQUEST_BYTES, unparsedRefusal } from './request-policy.js';
import { SendBuffer, type BackpressureMarks } from './send-buffer.js';
import { ReceiveGuard, ReceiveMeter } from './receive-meter.js';
import type { LogEntry, OutputGap } from '../output/index.js';
import type { MemoryBudget } from '../memory/index.js';
import type { Session, SessionLink, WatcherLink } from '../session/index.js';

export type HandshakeState = 'new' | 'initializing' | 'ready';

/** Answers longer than this go to the socket as a Buffer, still in a text frame (see `send`). */
const LARGE_TEXT_CHARS = 64 * 1024;

export interface ConnectionContext {
  conn: Connection;
  /** Runs right after this request's answer was handed to the socket (so it precedes what this sends). */
  afterReply?: () => void;
  /** Bytes reserved for this request's answer (`reserveAnswer`), given back once it is sent. */
  answerBytes?: number;
}

export class Connection implements SessionLink, WatcherLink {
  readonly dialect = new Dialect();
  state: HandshakeState = 'new';
  session: Session | null = null;
  /**
   * Extension `attach`: the session this connection watches read-only (its `session` is then
   * null: it acknowledges nothing, starts nothing, and nothing is pushed to it).
   */
  watching: Session | null = null;
  /** The extensions a watching connection negotiated (its own, not its session's). */
  watchExtensions: ReadonlySet<string> = new Set();
  /** The send buffer went above the high-water mark and has not drained to the low one yet. */
  backpressured = false;
  closed = false;
  /** Aborted when the socket closes: long-polls waiting for this connection give up at once. */
  private readonly closing = new AbortController();
  get signal(): AbortSignal {
    return this.closing.signal;
  }
  /** Pong seen since the last ping (server heartbeat). */
  alive = true;
  /** Heartbeat, probe, send-stall clock and initialize deadline (liveness.ts). */
  private readonly liveness = new Liveness(this);
  /** Past this many in flight, new requests are refused at once (the server sets it). */
  maxInflight = Number.POSITIVE_INFINITY;
  /** Past this many bytes in flight, new requests are refused at once (the server sets it: the largest message). */
  maxRequestBytes = Number.POSITIVE_INFINITY;
  /** What this connection holds, in the memory budget and its session's fair share (held-memory.ts). */
  private readonly memory: HeldMemory = new HeldMemory(this, (): number => this.gate.bytes + this.ws.bufferedAmount + (this.receiver?.held ?? 0));
  /** Why the socket is not read now (`pauseReading`, read-pause.ts). */
  private readonly reading: ReadPause;
  /** Backpressure, drain waiters and answers' reserved room (send-buffer.ts). */
  private readonly sendBuffer: SendBuffer;
  /** Requests in flight, refused, or held back until they may be handled (request-gate.ts). */
  private readonly gate: RequestGate = new RequestGate(this, (): boolean => this.memory.budget?.pressured ?? false);
  /** Messages being received (`ReceiveMeter`). */
  private receiver: ReceiveMeter | null = null;
  /** Holds messages being received to the memory budget (receive-meter.ts). */
  private receiveGuard: ReceiveGuard | null = null;
  /** The link carries binary messages (a WebSocket; not stdio): the binaryOutput extension may be accepted. @internal */
  binaryFrames = true;
  /** How long a connection paused mid-message by the budget may stay so (the server sets its --stall-timeout). */
  receiveStallMs = 30_000;
  constructor(
    readonly ws: WebSocket,
    /** sha256 of the bearer token this connection presented (empty when auth is off). */
    readonly credential: Buffer,
    private readonly rpc: JSONRPCServer<ConnectionContext>,
    marks: BackpressureMarks,
    readonly remote: string,
  ) {
    this.sendBuffer = new SendBuffer(this, marks);
    this.reading = new ReadPause(ws, () => this.closed);
    // Every concurrent long-poll listens on it: any number of them is legitimate, no leak.
    setMaxListeners(0, this.closing.signal);
    ws.on('message', (data, isBinary) => this.onMessage(data as Buffer | Buffer[], isBinary));
    ws.on('pong', () => this.liveness.pong());
  }

  /**
   * Server heartbeat, every ping interval: false (drop it) when the peer missed two pongs in
   * a row. A ping that queued behind a backlog which has since drained in part is excused:
   * a slow reader behind megabytes of output sees it late, but it is reading. A peer that
   * reads nothing at all is the send-stall rule's (`stalledFor`).
   */
  heartbeat(): boolean {
    return this.liveness.heartbeat(this.afterSend);
  }

  /**
   * How long the send buffer has been non-empty without any write completing (0 when it is
   * empty or moving). The server drops a connection stalled past its limit, so a peer that
   * stops reading cannot hold its session (and the output queued for it) forever.
   */
  stalledFor(now: number): number {
    return this.liveness.stalledFor(now);
  }

  /**
   * A connection must complete `initialize` within `ms`, or it is closed: an idle socket
   * costs a descriptor and belongs to nobody.
   */
  requireInitializeWithin(ms: number): void {
    this.liveness.requireInitializeWithin(ms);
  }

  /**
   * Someone tries to resume this connection's session (-32010): the usual cause is that this
   * socket died without a FIN (a laptop that slept, a VPN that flapped). Ping it now instead
   * of waiting for the 30 s heartbeat; without a pong in time it is dropped, its session
   * detaches, and the client's next retry succeeds.
   */
  /** Ends the connection: its session is gone (SessionLink). */
  drop(reason: string): void {
    this.ws.close(1011, reason.slice(0, 120));
  }

  probe(timeoutMs: number): void {
    this.liveness.probe(timeoutMs);
  }

  /** Watches `session` read-only from now on (an attach as a watcher, or its writer's place taken). */
  watch(session: Session, extensions: ReadonlySet<string>): void {
    this.session = null;
    this.watching = session;
    this.watchExtensions = extensions;
    session.watch(this);
    this.memory.report();
  }

  /** Another connection took the writer's place (`attach` with `take`): this one watches from now on, and is told. */
  writerTaken(session: Session): void {
    this.watch(session, session.extensions);
    this.sendNotification(Method.sessionWriter, { writer: false, reason: 'taken' });
  }

  /** The watched session ended (WatcherLink): there is nothing left on this connection to talk about. */
  sessionEnded(ended: SessionEndedNotification): void {
    this.sendNotification(Method.sessionEnded, ended);
    this.ws.close(1000, 'session ended');
  }

  /** Counts this connection's requests in flight and its send buffer in the server's memory budget. */
  useMemoryBudget(budget: MemoryBudget): void {
    this.memory.useBudget(budget);
  }

  private onMessage(data: Buffer | Buffer[], isBinary: boolean): void {
    this.receiver?.messageDone();
    let buf = Array.isArray(data) ? Buffer.concat(data) : data;
    if (isBinary && this.session?.extensions.has('binaryOutput')) {
      buf = binaryPayload(buf);
      // JSON may still come in binary frames; a tether binary frame starts below any JSON byte.
      if (isTetherBinaryFrame(buf)) return this.onBinaryFrame(buf);
    }
    // What the frame will hold once parsed, known before it is parsed: a frame of millions of
    // tiny values is refused unread (it would hold many times its size), a big string passes.
    const { structural, cost, id } = frameCost(buf);
    const unparsed = unparsedRefusal(structural, this.maxRequestBytes);
    if (unparsed) {
      this.answer({ id, error: unparsed });
      return;
    }
    const decoded = decodeFrame(buf);
    if (!decoded.ok) {
      this.answer({ id: decoded.id, error: decoded.error });
      return;
    }
    this.dialect.observe(decoded.hasJsonrpc);
    const message = decoded.message;
    if (message.kind === 'response') return; // the server sends no requests; stray replies are ignored
    if (message.kind === 'notification' && message.method === Method.processAck && this.session?.clientAcks) {
      // The hot path of the `acks` extension: handled at once, in arrival order.
      this.onAck(message.params);
      return;
    }
    // Each waiting request holds memory: bounded here in count and in what its parsed frame
    // holds, and by the server's memory budget (request-policy.ts).
    const refusal = this.gate.refusal(message.method, cost, (what) => this.memory.budget?.refusal(what) ?? null);
    if (refusal) {
      if (message.kind === 'request') this.answer({ id: message.id, error: refusal });
      return;
    }
    this.gate.enter(cost);
    this.memory.requestsChanged(cost);
    const ctx: ConnectionContext = { conn: this };
    const settled = () => {
      this.gate.leave(cost);
      this.memory.requestsChanged(-cost);
      if (ctx.answerBytes) this.sendBuffer.answerSent(ctx.answerBytes);
    };
    const how = admission(message.kind, message.method, this.backpressured);
    const dispatch = () =>
      this.rpc.receive(withJsonrpc(decoded.raw) as never, ctx).then(
        async (response) => {
          // Handled at once, its answer waits for room (it still counts as in flight meanwhile).
          if (how === 'reply' && this.backpressured && !(await this.gate.wait('drain'))) response = null;
          if (response) this.send(response);
          ctx.afterReply?.();
          settled();
        },
        (err: unknown) => {
          if (message.kind === 'request') {
            this.send({ id: message.id, error: { code: -32603, message: err instanceof Error ? err.message : String(err) } });
          }
          settled();
        },
      );
    // Every answer waits for room in the send buffer (process/read reserves its own room
    // after its long-poll), large ones for a place too. The waiting requests still count above.
    if (how === 'now' || how === 'reply') return void dispatch();
    const handle = how === 'place' ? () => void Promise.resolve(dispatch()).finally(() => this.gate.placeDone()) : () => void dispatch();
    this.gate.wait(how).then((open) => (open ? handle() : settled()));
  }

  /** Resolves when the socket is gone. */
  private readonly whenClosed = new Promise<void>((resolve) => this.closing.signal.addEventListener('abort', () => resolve(), { once: true }));

  /** Stops reading the socket for `reason` (several may hold it paused at once). */
  pauseReading(reason: string): void {
    this.reading.pause(reason);
  }

  /** `reason` no longer holds the socket paused; it is read again once no reason is left. */
  resumeReading(reason: string): void {
    this.reading.resume(reason);
  }

  /**
   * Counts the messages this connection is still receiving (`ReceiveMeter`, on its raw
   * socket) in the memory budget and its session's share, and holds them to it (`ReceiveGuard`).
   */
  meterReceiving(socket: Socket): void {
    const conn = this;
    // The meter reports to the guard, which reads the meter: the callback runs only on data, once both exist.
    const receiver = new ReceiveMeter(socket, (bytes) => {
      this.memory.receivingChanged(bytes);
      if (bytes > SMALL_REQUEST_BYTES) guard.check();
    });
    const guard = new ReceiveGuard(receiver, this.memory.budget, {
      get closed() {
        return conn.closed;
      },
      get session() {
        return conn.session;
      },
      whenClosed: this.whenClosed,
      pause: () => this.pauseReading('budget'),
      resume: () => this.resumeReading('budget'),
      close: (reason) => this.ws.close(1013, reason),
    }, this.receiveStallMs);
    this.receiver = receiver;
    this.receiveGuard = guard;
    this.ws.on('ping', () => receiver.messageDone());
    this.ws.on('pong', () => receiver.messageDone());
  }

  /**
   * A binary frame of the `binaryOutput` extension from the client: only acks go this way.
   * Anything malformed gets one error answer (id null, like unparsable JSON) saying what,
   * and the connection carries on; an ack for an unknown handle is ignored (already forgotten).
   */
  private onBinaryFrame(buf: Buffer): void {
    const decoded = decodeBinaryFrame(buf);
    if (!decoded.ok || decoded.frame.kind !== 'ack') {
      const problem = decoded.ok ? 'binary output frames go from the server to the client only' : decoded.error;
      this.answer({ id: null, error: binaryFrameRefusal(problem) });
      return;
    }
    if (this.session?.clientAcks) this.session.acknowledgeHandle(decoded.frame.handle, decoded.frame.seq);
  }

  /** `process/ack {processId, seq}`: malformed ones are ignored (a notification has nobody to answer). */
  private onAck(params: unknown): void {
    const p = params as { processId?: unknown; seq?: unknown } | null;
    if (!p || typeof p.processId !== 'string' || typeof p.seq !== 'number' || !Number.isSafeInteger(p.seq) || p.seq < 0) return;
    this.session?.acknowledge(p.processId, p.seq);
  }

  /**
   * An answer the connection makes itself (a refusal, an unparsable frame): sent now, or,
   * while the send buffer is over its mark, once it drained, held back like every answer
   * (at 64 waiting the socket stops being read).
   */
  private answer(message: object): void {
    if (!this.backpressured) return this.send(message);
    void this.gate.wait('drain').then((open) => open && this.send(message));
  }

  send(message: object): void {
    if (this.closed) return;
    const text = this.dialect.encode(message);
    // A large answer is queued as bytes, not as a string: a string waiting in the socket's
    // queue (a client that reads slowly) lives on the V8 heap, a Buffer outside it, where the
    // memory budget counts it and the heap limit does not. Either way it is a text frame:
    // JSON goes out as text, binary frames carry only the binaryOutput extension's output.
    this.ws.send(text.length > LARGE_TEXT_CHARS ? Buffer.from(text) : text, { binary: false }, this.afterSend);
    this.checkBackpressure();
  }

  /** A notification in the client's dialect (fs/missingChanged…; process events go through `sendEntry`). */
  sendNotification(method: string, params: object): void {
    this.send({ method, params });
  }

  // SessionLink

  get congested(): boolean {
    return this.sendBuffer.congested;
  }

  sendGap(proc: FramedProcess, gap: OutputGap): void {
    if (this.closed) return;
    this.send({ method: Method.processGap, params: { processId: proc.id, firstSeq: gap.first, lastSeq: gap.last, bytes: gap.bytes, reason: 'keep-last' } });
  }

  sendEntry(proc: FramedProcess, entry: LogEntry): void {
    if (this.closed) return;
    // Codex dialect: the kernel taking the frame is the acknowledgement (it is then only
    // lost if the link dies with it in flight, and it stays in the retained history).
    const written = this.session?.clientAcks ? undefined : proc;
    if (entry.kind === 'output' && proc.handle !== 0) {
      if (writeBinaryEntry(this.ws, proc, entry, written, this.afterSend)) this.checkBackpressure();
      return;
    }
    const seq = entry.seq;
    this.ws.send(eventFrame(this.dialect, proc, entry), { binary: false }, (err) => {
      if (!err) written?.written(seq);
      this.afterSend();
    });
    this.checkBackpressure();
  }

  /**
   * For a request whose answer may be large (a process/read of the whole retention): waits
   * until the send buffer, plus the answers already being built, leaves room under the
   * high-water mark for `bytes` more (one answer always passes), then reserves them until the
   * answer is sent. So a client that asks and asks without reading its socket has about the
   * high-water mark queued for it, not one answer per request.
   */
  reserveAnswer(ctx: ConnectionContext, bytes: number): Promise<void> {
    return this.sendBuffer.reserveAnswer(ctx, bytes);
  }

  /** Resolves once the send buffer is below the low-water mark (at once if it is, or if the socket is gone). */
  whenDrained(): Promise<void> {
    return this.sendBuffer.whenDrained();
  }

  /** Above the high-water mark until it drains to the low one. */
  private checkBackpressure(): void {
    this.memory.sendChanged(this.ws.bufferedAmount);
    this.sendBuffer.queued();
  }

  /** Send callbacks run in order as frames reach the kernel: the place to notice the buffer drained. */
  private readonly afterSend = (): void => {
    this.liveness.progressed();
    this.memory.sendChanged(this.ws.bufferedAmount);
    if (!this.sendBuffer.wrote()) return;
    const session = this.session;
    if (session?.hasQueued) session.pump();
  };

  /**
   * An orderly close with `code` and `reason` (a close frame, which the peer sees before the
   * socket goes); a peer that does not answer it within `graceMs` has its socket cut.
   * Resolves once the socket is closed.
   */
  closeWith(code: number, reason: string, graceMs: number): Promise<void> {
    if (this.closed || this.ws.readyState === this.ws.CLOSED) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.ws.terminate(), graceMs);
      this.ws.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
      this.ws.close(code, reason);
    });
  }

  /** The socket is gone: the session (if any) becomes detached and its TTL starts. */
  onClosed(): void {
    if (this.closed) return;
    this.closed = true;
    // What was queued died with the socket; requests in flight still hold their data until they settle.
    this.memory.sendClosed();
    this.liveness.dispose();
    this.closing.abort();
    this.sendBuffer.wakeDrainWaiters();
    this.gate.close();
    this.sendBuffer.answerSent(0);
    const session = this.session;
    this.memory.report();
    this.receiveGuard?.dispose();
    this.memory.receivingClosed();
    this.session = null;
    session?.detach(this);
    this.watching?.unwatch(this);
    this.watching = null;
  }
}
