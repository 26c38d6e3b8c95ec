/**
 * A deliberately small raw-WebSocket JSON-RPC client for protocol tests: it speaks exactly
 * what docs/protocol.md shows (no `jsonrpc` member unless asked), exposes every frame it gets,
 * and hides nothing (no retries, no resume), so tests see the server's real answers.
 */
import { EventEmitter } from 'node:events';
import WebSocket from 'ws';

export interface RpcErrorObject {
  code: number;
  message: string;
  data?: unknown;
}

export interface Frame {
  id?: string | number | null;
  method?: string;
  params?: any;
  result?: any;
  error?: RpcErrorObject;
  jsonrpc?: string;
}

export class RpcReplyError extends Error {
  constructor(readonly error: RpcErrorObject) {
    super(`${error.code}: ${error.message}`);
  }
  get code(): number {
    return this.error.code;
  }
}

export interface RawClientOptions {
  token?: string;
  headers?: Record<string, string>;
  /** Add `jsonrpc: "2.0"` to every message this client sends. */
  jsonrpc?: boolean;
}

export class RawClient extends EventEmitter {
  /** Every frame received, in order. */
  readonly frames: Frame[] = [];
  /** Notifications received, in order. */
  readonly notifications: Frame[] = [];
  private nextId = 1;
  private pending = new Map<string | number, { resolve(f: Frame): void }>();
  private closedPromise: Promise<{ code: number; reason: string }>;

  private constructor(
    readonly ws: WebSocket,
    private readonly options: RawClientOptions,
  ) {
    super();
    ws.on('message', (data, isBinary) => {
      const text = isBinary ? Buffer.from(data as Buffer).toString('utf8') : data.toString();
      const frame = JSON.parse(text) as Frame;
      this.frames.push(frame);
      if (frame.method !== undefined && frame.id === undefined) {
        this.notifications.push(frame);
        this.emit('notification', frame);
      } else if (frame.id !== undefined && frame.id !== null && this.pending.has(frame.id)) {
        const p = this.pending.get(frame.id)!;
        this.pending.delete(frame.id);
        p.resolve(frame);
      } else {
        this.emit('orphan', frame);
      }
      this.emit('frame', frame);
    });
    this.closedPromise = new Promise((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  }

  static connect(url: string, options: RawClientOptions = {}): Promise<RawClient> {
    const headers: Record<string, string> = { ...(options.headers ?? {}) };
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
    const ws = new WebSocket(url, { headers, perMessageDeflate: false });
    return new Promise((resolve, reject) => {
      const client = new RawClient(ws, options);
      ws.once('open', () => resolve(client));
      ws.once('error', reject);
      ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => reject(Object.assign(new Error(`HTTP ${res.statusCode}: ${body}`), { status: res.statusCode, body })));
      });
    });
  }

  /** Sends a request and resolves with the whole reply frame (result or error). */
  call(method: string, params?: unknown): Promise<Frame> {
    const id = this.nextId++;
    const reply = new Promise<Frame>((resolve) => this.pending.set(id, { resolve }));
    this.send(params === undefined ? { id, method } : { id, method, params });
    return reply;
  }

  /** Sends a request and resolves with its result, or rejects with `RpcReplyError`. */
  async request<T = any>(method: string, params?: unknown): Promise<T> {
    const frame = await this.call(method, params);
    if (frame.error) throw new RpcReplyError(frame.error);
    return frame.result as T;
  }

  notify(method: string, params?: unknown): void {
    this.send(params === undefined ? { method } : { method, params });
  }

  send(message: object): void {
    this.ws.send(JSON.stringify(this.options.jsonrpc ? { jsonrpc: '2.0', ...message } : message));
  }

  sendRaw(data: string | Buffer, binary = false): void {
    this.ws.send(data, { binary });
  }

  /** Next frame satisfying `pred` (looking at frames already received first when `fromStart`). */
  waitFor(pred: (f: Frame) => boolean, timeoutMs = 10_000, fromStart = false): Promise<Frame> {
    if (fromStart) {
      const found = this.frames.find(pred);
      if (found) return Promise.resolve(found);
    }
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.off('frame', onFrame);
        reject(new Error('timed out waiting for a frame'));
      }, timeoutMs);
      const onFrame = (f: Frame) => {
        if (pred(f)) {
          clearTimeout(timer);
          this.off('frame', onFrame);
          resolve(f);
        }
      };
      this.on('frame', onFrame);
    });
  }

  /** Waits for `process/closed` of `processId` (already received counts). */
  waitClosed(processId: string, timeoutMs = 10_000): Promise<Frame> {
    return this.waitFor((f) => f.method === 'process/closed' && f.params?.processId === processId, timeoutMs, true);
  }

  /** Decoded output of one process from the notifications received so far. */
  output(processId: string, stream?: string): string {
    return this.outputBuffer(processId, stream).toString('utf8');
  }

  /** The process's output in `seq` order, as docs/protocol.md tells clients to order events (Codex may send them out of order). */
  outputBuffer(processId: string, stream?: string): Buffer {
    const parts = this.notifications
      .filter((f) => f.method === 'process/output' && f.params.processId === processId && (!stream || f.params.stream === stream))
      .sort((a, b) => (a.params.seq as number) - (b.params.seq as number))
      .map((f) => Buffer.from(f.params.chunk as string, 'base64'));
    return Buffer.concat(parts);
  }

  /** `initialize` + `initialized`; returns the initialize result. */
  async handshake(clientName = 'tether-test', resumeSessionId?: string): Promise<{ sessionId: string; environmentInfo?: any }> {
    const result = await this.request('initialize', resumeSessionId ? { clientName, resumeSessionId } : { clientName });
    this.notify('initialized', {});
    return result;
  }

  get closed(): Promise<{ code: number; reason: string }> {
    return this.closedPromise;
  }

  /** Clean close (close frame). */
  async close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return;
    this.ws.close();
    await this.closedPromise;
  }

  /** Abrupt TCP drop, no close frame: what a sleeping laptop looks like to the server. */
  async drop(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return;
    this.ws.terminate();
    await this.closedPromise;
  }
}

export const connect = RawClient.connect;
export const b64 = (s: string | Buffer): string => Buffer.from(s).toString('base64');
export const unb64 = (s: string): string => Buffer.from(s, 'base64').toString('utf8');

/** The raw clients a test opened, dropped together when it ends (in afterEach). */
export class RawClientPool {
  private readonly clients: RawClient[] = [];

  async connect(url: string, options?: RawClientOptions): Promise<RawClient> {
    const c = await RawClient.connect(url, options);
    this.clients.push(c);
    return c;
  }

  async dropAll(): Promise<void> {
    await Promise.all(this.clients.splice(0).map((c) => c.drop()));
  }
}
