/**
 * One WebSocket connection: decodes frames in the Codex dialect, dispatches requests through
 * the shared `json-rpc-2.0` server WITHOUT awaiting one before the next (a long-poll read
 * never delays a write), answers in the client's dialect, and tracks the handshake state and
 * the send-buffer backpressure of the session attached to it.
 */
import { setMaxListeners } from 'node:events';
import type WebSocket from 'ws';
import type { JSONRPCServer } from 'json-rpc-2.0';
import { decodeFrame, Dialect, withJsonrpc } from '../protocol/index.js';
import type { OutputStream } from '../protocol/index.js';
import type { Session, SessionLink } from './session.js';

export type HandshakeState = 'new' | 'initializing' | 'ready';

export interface ConnectionContext {
  conn: Connection;
}

export interface BackpressureMarks {
  /** Stop reading the session's pipes above this many buffered bytes. */
  highWaterBytes: number;
  /** Resume below this. */
  lowWaterBytes: number;
}

export class Connection implements SessionLink {
  readonly dialect = new Dialect();
  state: HandshakeState = 'new';
  session: Session | null = null;
  backpressured = false;
  closed = false;
  /** Aborted when the socket closes: long-polls waiting for this connection give up at once. */
  private readonly closing = new AbortController();
  get signal(): AbortSignal {
    return this.closing.signal;
  }
  /** Pong seen since the last ping (server heartbeat). */
  alive = true;
  private bytesWrittenAtPing = 0;
  private backloggedAtPing = false;
  private probeTimer: NodeJS.Timeout | null = null;

  constructor(
    readonly ws: WebSocket,
    /** sha256 of the bearer token this connection presented (empty when auth is off). */
    readonly credential: Buffer,
    private readonly rpc: JSONRPCServer<ConnectionContext>,
    private readonly marks: BackpressureMarks,
    readonly remote: string,
  ) {
    // Every concurrent long-poll listens on it: any number of them is legitimate, no leak.
    setMaxListeners(0, this.closing.signal);
    ws.on('message', (data, isBinary) => this.onMessage(data as Buffer | Buffer[], isBinary));
    ws.on('pong', () => {
      this.alive = true;
      if (this.probeTimer) {
        clearTimeout(this.probeTimer);
        this.probeTimer = null;
      }
    });
  }

  /**
   * Server heartbeat: false when the peer neither answered the previous ping nor took any
   * bytes since (a slow reader behind megabytes of output sees the ping late, but it is
   * reading: that is not a dead link).
   */
  heartbeat(): boolean {
    const written = (this.ws as unknown as { _socket?: { bytesWritten?: number } })._socket?.bytesWritten ?? 0;
    // Only a socket that had a user-space backlog counts: the kernel swallows a lone ping even
    // on a dead link, but it stops taking megabytes.
    const progressed = this.backloggedAtPing && written > this.bytesWrittenAtPing;
    if (!this.alive && !progressed) return false;
    this.alive = false;
    this.bytesWrittenAtPing = written;
    this.backloggedAtPing = this.ws.bufferedAmount > 0;
    this.ws.ping();
    return true;
  }

  /**
   * Someone tries to resume this connection's session (-32010): the usual cause is that this
   * socket died without a FIN (a laptop that slept, a VPN that flapped). Ping it now instead
   * of waiting for the 30 s heartbeat; without a pong in time it is dropped, its session
   * detaches, and the client's next retry succeeds.
   */
  probe(timeoutMs: number): void {
    if (this.closed || this.probeTimer) return;
    this.probeTimer = setTimeout(() => {
      this.probeTimer = null;
      if (!this.closed) this.ws.terminate();
    }, timeoutMs);
    this.probeTimer.unref?.();
    try {
      this.ws.ping();
    } catch {
      this.ws.terminate();
    }
  }

  private onMessage(data: Buffer | Buffer[], _isBinary: boolean): void {
    const decoded = decodeFrame(data);
    if (!decoded.ok) {
      this.send({ id: decoded.id, error: decoded.error });
      return;
    }
    this.dialect.observe(decoded.hasJsonrpc);
    const message = decoded.message;
    if (message.kind === 'response') return; // the server sends no requests; stray replies are ignored
    const ctx: ConnectionContext = { conn: this };
    this.rpc.receive(withJsonrpc(decoded.raw) as never, ctx).then(
      (response) => {
        if (response) this.send(response);
      },
      (err: unknown) => {
        if (message.kind === 'request') {
          this.send({ id: message.id, error: { code: -32603, message: err instanceof Error ? err.message : String(err) } });
        }
      },
    );
  }

  send(message: object): void {
    if (this.closed) return;
    this.ws.send(this.dialect.encode(message), this.afterSend);
    this.checkBackpressure();
  }

  // SessionLink
  sendNotification(method: string, params: object): void {
    this.send({ method, params });
  }

  /**
   * The hot path: the frame is built straight into one Buffer (the base64 needs no escaping,
   * so JSON.stringify need not scan it, and ws sends the Buffer without another copy).
   */
  sendOutput(processId: string, seq: number, stream: OutputStream, chunk: string, onWritten: (ok: boolean) => void): boolean {
    if (this.closed) return false;
    const prefix =
      (this.dialect.usesJsonrpc ? '{"jsonrpc":"2.0","method":"process/output","params":{"processId":' : '{"method":"process/output","params":{"processId":') +
      JSON.stringify(processId) +
      ',"seq":' +
      seq +
      ',"stream":"' +
      stream +
      '","chunk":"';
    const prefixBytes = Buffer.byteLength(prefix);
    const frame = Buffer.allocUnsafe(prefixBytes + chunk.length + 3);
    frame.write(prefix, 0, 'utf8');
    frame.write(chunk, prefixBytes, 'latin1');
    frame.write('"}}', prefixBytes + chunk.length, 'latin1');
    this.ws.send(frame, { binary: false }, (err) => {
      onWritten(!err);
      this.afterSend();
    });
    this.checkBackpressure();
    return true;
  }

  private checkBackpressure(): void {
    if (!this.backpressured && this.ws.bufferedAmount > this.marks.highWaterBytes) {
      this.backpressured = true;
      this.session?.flowChanged();
    }
  }

  /** Send callbacks run in order as frames reach the kernel: the place to notice the buffer drained. */
  private readonly afterSend = (): void => {
    if (this.backpressured && (this.closed || this.ws.bufferedAmount <= this.marks.lowWaterBytes)) {
      this.backpressured = false;
      this.session?.flowChanged();
    }
  };

  /** The socket is gone: the session (if any) becomes detached and its TTL starts. */
  onClosed(): void {
    if (this.closed) return;
    this.closed = true;
    this.backpressured = false;
    if (this.probeTimer) clearTimeout(this.probeTimer);
    this.closing.abort();
    const session = this.session;
    this.session = null;
    session?.detach(this);
  }
}
