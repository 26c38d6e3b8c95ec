/**
 * One WebSocket connection (one "generation") of a client: JSON-RPC requests and
 * notifications in the exec-server dialect, plus the client-side keepalive. It knows
 * nothing about sessions or recovery; when it dies it says why, once, through `onClose`,
 * and every request still in flight rejects with `ConnectionLostError`.
 */
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { decodeFrame, stringifyMessage, type JsonRpcId } from '../protocol/dialect.js';
import { peekOutputNotification } from './process/output-notification.js';
import { RpcError } from '../protocol/errors.js';
import { binaryPayload, isTetherBinaryFrame } from '../protocol/binary-frames.js';
import { AuthRefusedError, ConnectionLostError, PeerClosedError, UpgradeAnsweredError } from './errors.js';
import { DemuxSocket, type OutputReceiver } from './demux-socket.js';
import { PromptAck } from './prompt-ack.js';

/** How long a connection whose peer sent its close frame may take to end its socket. */
const CLOSING_GRACE_MS = 2_000;

export interface ConnectionOptions {
  url: string;
  token?: string;
  /** Certificate authorities trusted for `wss://` instead of Node's bundled list (PEM). */
  ca?: TrustedCa;
  generation: number;
  /** How long the upgrade may take before the attempt counts as failed. */
  handshakeTimeoutMs: number;
  /** Send a ping this often (0 disables the keepalive). */
  keepaliveIntervalMs: number;
  /** A ping unanswered for this long means the link is dead (half-open TCP, black hole). */
  keepaliveTimeoutMs: number;
  /** Send `jsonrpc: "2.0"` on every message (both servers accept either). */
  jsonrpc: boolean;
  /** Called for every notification, from the first frame on (before any handshake completes). */
  onNotification: (method: string, params: unknown, connection: Connection) => void;
  /**
   * Called for every binary message of the `binaryOutput` extension (protocol/binary-frames.ts),
   * undecoded, as the fragments it arrived in (tether sends the header and the bytes apart).
   */
  onBinaryFrame?: (fragments: Buffer[], connection: Connection) => void;
  /**
   * Over `ws://`: output messages are taken off the socket before `ws` parses them
   * (demux-socket.ts) and handed here whole; `onBinaryFrame` then sees only the rest.
   */
  output?: OutputReceiver;
  onClose: (reason: Error, connection: Connection) => void;
  /** Error replies the server could not tie to a request (id null / -1). */
  onStrayError?: (error: { code: number; message: string }) => void;
}

/** The largest message a server may send (`ws`'s maxPayload; the demux's limit for output). */
const MAX_PAYLOAD_BYTES = 256 * 1024 * 1024;

/** PEM text or buffers: one CA (or a bundle of several), or a list of them. */
export type TrustedCa = string | Buffer | Array<string | Buffer>;

interface Pending {
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
}

export class Connection {
  readonly generation: number;
  private readonly pending = new Map<JsonRpcId, Pending>();
  private nextId = 1;
  private closedReason: Error | null = null;
  private pingTimer: NodeJS.Timeout | undefined;
  private pongTimer: NodeJS.Timeout | undefined;
  private lastInboundAt = 0;
  private paused = false;
  private readonly promptAck = new PromptAck(() => this.sendControl('pong'));

  private constructor(
    private readonly ws: WebSocket,
    private readonly options: ConnectionOptions,
  ) {
    this.generation = options.generation;
  }

  /**
   * The server leaves Nagle's algorithm on (a Codex exec-server): after each read, unless
   * something was sent since, a pong carries the TCP ACK it waits for (prompt-ack.ts).
   */
  ackReadsPromptly(): void {
    this.promptAck.enabled = true;
  }

  /** Opens the socket; rejects with `AuthRefusedError` on 401/403, otherwise with the transport error. */
  static open(options: ConnectionOptions): Promise<Connection> {
    return new Promise((resolve, reject) => {
      const headers: Record<string, string> = {};
      if (options.token !== undefined) headers.Authorization = `Bearer ${options.token}`;
      let ws: WebSocket;
      // Bound below, before any byte can arrive.
      let connection: Connection | undefined;
      const output = options.output;
      const demuxSocket =
        output && /^ws:/i.test(options.url)
          ? new DemuxSocket(
              {
                memoryFor: (header) => (connection?.isOpen ? output.memoryFor(header) : null),
                output: (header, pieces, memory) => {
                  if (connection?.isOpen) output.output(header, pieces, memory);
                  else memory?.releaseAll(pieces);
                },
              },
              MAX_PAYLOAD_BYTES,
              () => connection?.markInbound(),
            )
          : null;
      try {
        ws = new WebSocket(options.url, {
          headers,
          perMessageDeflate: false,
          handshakeTimeout: options.handshakeTimeoutMs,
          maxPayload: MAX_PAYLOAD_BYTES,
          ...(options.ca !== undefined ? { ca: options.ca } : {}),
          ...(demuxSocket ? { createConnection: demuxSocket.connect as never } : {}),
        });
      } catch (err) {
        reject(err as Error);
        return;
      }
      connection = new Connection(ws, options);
      let settled = false;
      const fail = (err: Error) => {
        if (settled) return;
        settled = true;
        ws.removeAllListeners();
        ws.on('error', () => {});
        try {
          ws.terminate();
        } catch {
          /* already gone */
        }
        reject(err);
      };
      ws.on('unexpected-response', (_req, res) => {
        const status = res.statusCode ?? 0;
        const parts: Buffer[] = [];
        let size = 0;
        const done = () => {
          const body = plainTextLine(res.headers['content-type'], Buffer.concat(parts));
          fail(status === 401 || status === 403 ? new AuthRefusedError(status, body) : new UpgradeAnsweredError(status, res.statusMessage ?? '', res.headers['content-type'], body));
        };
        res.on('data', (chunk: Buffer) => {
          if (size < 4096) parts.push(chunk);
          size += chunk.length;
        });
        res.on('end', done);
        res.on('error', done);
        res.on('close', done);
      });
      ws.once('error', (err) => fail(oneLine(err)));
      ws.once('close', () => fail(new Error('connection closed during the WebSocket handshake')));
      // Binary output arrives as header + bytes fragments: take them as they are (no joining copy).
      ws.binaryType = 'fragments';
      // Frames can arrive in the same tick as 'open'; listen before it so none is missed.
      ws.on('message', (data, isBinary) => connection!.onMessage(data, isBinary));
      ws.once('open', () => {
        if (settled) return;
        settled = true;
        ws.removeAllListeners('error');
        ws.removeAllListeners('close');
        ws.removeAllListeners('unexpected-response');
        demuxSocket?.start();
        connection!.attach();
        resolve(connection!);
      });
    });
  }

  get isOpen(): boolean {
    return this.closedReason === null;
  }

  request<T = unknown>(method: string, params?: unknown): Promise<T> {
    if (this.closedReason) {
      return Promise.reject(new ConnectionLostError(`connection lost: ${this.closedReason.message}`, this.generation));
    }
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.send({ id, method, params: params ?? {} });
    });
  }

  notify(method: string, params?: unknown): void {
    if (this.closedReason) return;
    this.send({ method, params: params ?? {} });
  }

  /** Sends one binary frame (extension `binaryOutput`: acks). */
  sendBinary(frame: Buffer): void {
    if (this.closedReason) return;
    this.promptAck.sent();
    this.ws.send(frame, { binary: true }, (err) => {
      if (err) this.sendFailed(err);
    });
  }

  /**
   * Stop reading from the socket (flow control: the consumer is behind). The server sees TCP
   * backpressure and stops reading its children. The keepalive is suspended meanwhile: a
   * pong cannot be seen without reading.
   */
  pause(): void {
    if (this.paused || this.closedReason) return;
    this.paused = true;
    clearTimeout(this.pongTimer);
    this.pongTimer = undefined;
    this.ws.pause();
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    this.lastInboundAt = performance.now();
    if (!this.closedReason) this.ws.resume();
  }

  /** Orderly close (close frame), e.g. when the client is closed. */
  close(reason = 'closed by the client'): void {
    if (this.closedReason) return;
    try {
      this.ws.close(1000);
    } catch {
      /* ignore */
    }
    // Do not wait for the peer's close frame: the link may be dead.
    this.shutdown(new Error(reason));
    setTimeout(() => this.ws.terminate(), 1000).unref();
  }

  /** Abrupt close: the link is considered dead. */
  destroy(reason: Error): void {
    if (this.closedReason) return;
    this.ws.terminate();
    this.shutdown(reason);
  }

  private send(message: Record<string, unknown>): void {
    const framed = this.options.jsonrpc ? { jsonrpc: '2.0', ...message } : message;
    this.promptAck.sent();
    this.ws.send(stringifyMessage(framed), (err) => {
      if (err) this.sendFailed(err);
    });
  }

  /**
   * A send failed. If the peer's close frame has already arrived (CLOSING), its 'close' event
   * follows once the socket ends and carries the code and reason (a server that stops says so
   * there: close-reasons.ts): that is the loss to report, not this, or a client that happened
   * to send in between would hear a plain drop and reconnect in vain. Past a grace the send
   * failure is the loss after all (a peer that never ends its socket).
   */
  private sendFailed(err: Error): void {
    const lost = new Error(`send failed: ${err.message}`);
    if (this.ws.readyState === WebSocket.CLOSING) setTimeout(() => this.destroy(lost), CLOSING_GRACE_MS).unref();
    else this.destroy(lost);
  }

  private attach(): void {
    const ws = this.ws;
    ws.on('error', (err) => this.shutdown(err));
    ws.on('close', (code, reason) => this.shutdown(new PeerClosedError(code, reason.toString('utf8'))));
    ws.on('pong', () => this.onPong());
    ws.on('ping', () => (this.lastInboundAt = performance.now()));
    if (this.options.keepaliveIntervalMs > 0) {
      this.pingTimer = setInterval(() => this.ping(), this.options.keepaliveIntervalMs);
      this.pingTimer.unref();
    }
  }

  /**
   * A ping, or a pong (prompt-ack.ts), unless closed or paused (a paused reader cannot see a
   * pong, and owes no ACK: flow control wants the server to wait). Whether it went.
   */
  private sendControl(kind: 'ping' | 'pong'): boolean {
    if (this.closedReason || this.paused) return false;
    try {
      this.ws[kind]();
    } catch {
      return false; // closing
    }
    return true;
  }

  private ping(): void {
    if (!this.sendControl('ping')) return;
    this.promptAck.sent();
    // One deadline per outstanding ping: an answer to any ping proves the link is alive.
    if (!this.pongTimer) this.armPongDeadline(this.options.keepaliveTimeoutMs);
  }

  /**
   * The link is dead when a ping is outstanding and nothing at all arrived for the timeout.
   * Frames count as life too: on a slow link a pong can queue behind megabytes of output,
   * and declaring such a link dead would only make it replay the same output again.
   */
  private armPongDeadline(ms: number): void {
    this.pongTimer = setTimeout(() => {
      const silentFor = performance.now() - this.lastInboundAt;
      const left = this.options.keepaliveTimeoutMs - silentFor;
      if (left > 0) {
        this.armPongDeadline(left);
        return;
      }
      this.destroy(new Error(`no pong within ${this.options.keepaliveTimeoutMs} ms (link dead)`));
    }, ms);
    this.pongTimer.unref();
  }

  private onPong(): void {
    this.lastInboundAt = performance.now();
    clearTimeout(this.pongTimer);
    this.pongTimer = undefined;
  }

  /** Bytes arrived (the demux takes output off the socket before `ws` sees it). */
  private markInbound(): void {
    this.lastInboundAt = performance.now();
    this.promptAck.read();
  }

  private onMessage(data: WebSocket.RawData, isBinary: boolean): void {
    if (this.closedReason) return;
    this.lastInboundAt = performance.now();
    this.promptAck.read(messageBytes(data));
    if (isBinary) {
      const fragments = Array.isArray(data) ? data : [binaryPayload(data)];
      if (isTetherBinaryFrame(fragments)) {
        this.options.onBinaryFrame?.(fragments, this);
        return;
      }
      data = binaryPayload(data);
    }
    if (!isBinary && Buffer.isBuffer(data)) {
      const output = peekOutputNotification(data); // most of a Codex server's traffic, parsed cheaply
      if (output) {
        this.options.onNotification(output.method, output.params, this);
        return;
      }
    }
    const decoded = decodeFrame(data as Buffer | ArrayBuffer | Buffer[]);
    if (!decoded.ok) return; // garbage from the server: nothing sensible to do but ignore it
    const message = decoded.message;
    switch (message.kind) {
      case 'notification':
        this.options.onNotification(message.method, message.params, this);
        return;
      case 'request':
        // The exec-server does not call clients for the methods tether uses; say so politely.
        this.send({ id: message.id, error: { code: -32601, message: `method not found: ${message.method}` } });
        return;
      case 'response': {
        const waiter = message.id === null ? undefined : this.pending.get(message.id);
        if (!waiter) {
          // id null (tether) or -1 (Codex): the server could not parse something we sent.
          if (message.error) this.options.onStrayError?.(message.error);
          return;
        }
        this.pending.delete(message.id!);
        if (message.error) {
          const e = message.error;
          waiter.reject(new RpcError(typeof e.code === 'number' ? e.code : -32603, String(e.message ?? 'error'), e.data));
        } else {
          waiter.resolve(message.result);
        }
      }
    }
  }

  private shutdown(reason: Error): void {
    if (this.closedReason) return;
    this.closedReason = reason;
    clearInterval(this.pingTimer);
    clearTimeout(this.pongTimer);
    // Tell the owner first, so it is already recovering when the requests below reject and
    // their callers ask for the next connection.
    this.options.onClose(reason, this);
    const lost = new ConnectionLostError(`connection lost: ${reason.message}`, this.generation, { cause: reason });
    for (const waiter of this.pending.values()) waiter.reject(lost);
    this.pending.clear();
  }
}

/**
 * What of an HTTP answer's body an error may quote: the first line of a plain-text body
 * (tether's own refusals are one line of text/plain), at most 200 characters; nothing of an
 * HTML page or any other kind of body.
 */
function plainTextLine(contentType: string | undefined, body: Buffer): string {
  if (!/^text\/plain\b/i.test(contentType ?? '')) return '';
  const line = body.toString('utf8').trim().split(/\r?\n/, 1)[0] ?? '';
  return line.length > 200 ? `${line.slice(0, 200)}…` : line;
}

/**
 * OpenSSL's errors carry its whole error queue in their message, over several lines: a TLS
 * failure (EPROTO) is said in one line from its reason, and a plain-HTTP server spoken to in
 * TLS (OpenSSL's "wrong version number") is named as such.
 */
function oneLine(err: Error): Error {
  const { code } = err as { code?: unknown };
  if (code !== 'EPROTO') return err;
  // OpenSSL's queue entry: "<id>:error:<hex>:<library>:<function>:<reason>:<file>:<line>:".
  const why = /:error:[0-9A-F]+:[^:\n]*:[^:\n]*:([^:\n]+):/i.exec(err.message)?.[1] ?? 'protocol error';
  const hint = why === 'wrong version number' ? ': the server does not speak TLS there (a ws:// URL?)' : '';
  return Object.assign(new Error(`TLS handshake failed (${why})${hint}`, { cause: err }), { code });
}

/** Bytes of a message as `ws` delivers it. */
function messageBytes(data: WebSocket.RawData): number {
  return Array.isArray(data) ? data.reduce((sum, piece) => sum + piece.length, 0) : data.byteLength;
}
