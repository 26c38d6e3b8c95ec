/**
 * A lean raw-WebSocket JSON-RPC client for benchmarks: no retries, no recording, per-process
 * notification routing, so what is timed is the server and the wire, not client bookkeeping.
 * It speaks the Codex dialect (no `jsonrpc` member), which both servers accept.
 */
import type { Socket } from 'node:net';
import WebSocket from 'ws';

export type ProcessEventHandler = (method: string, params: any) => void;

export class RpcCallError extends Error {
  constructor(
    readonly method: string,
    readonly code: number,
    message: string,
  ) {
    super(`${method}: ${code} ${message}`);
    this.name = 'RpcCallError';
  }
}

export class WsRpc {
  private nextId = 1;
  private readonly pending = new Map<number, { method: string; resolve: (r: any) => void; reject: (e: Error) => void }>();
  private readonly processHandlers = new Map<string, ProcessEventHandler>();
  private closedError: Error | undefined;

  private constructor(readonly ws: WebSocket) {
    ws.on('message', (data) => this.onMessage(data as Buffer));
    ws.on('close', () => this.failAll(new Error('connection closed')));
    ws.on('error', (error) => this.failAll(error));
  }

  static connect(url: string, options: { token?: string } = {}): Promise<WsRpc> {
    const headers: Record<string, string> = {};
    if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
    const ws = new WebSocket(url, { headers, perMessageDeflate: false, maxPayload: 256 * 1024 * 1024 });
    return new Promise((resolve, reject) => {
      ws.once('open', () => {
        (ws as unknown as { _socket: Socket })._socket.setNoDelay(true);
        resolve(new WsRpc(ws));
      });
      ws.once('error', reject);
    });
  }

  /** Connects and completes the initialize / initialized handshake. */
  static async session(url: string, clientName = 'tether-bench'): Promise<WsRpc> {
    const rpc = await WsRpc.connect(url);
    await rpc.request('initialize', { clientName });
    rpc.notify('initialized', {});
    return rpc;
  }

  /** The underlying TCP socket (pause/resume it to simulate a slow reader). */
  get socket(): Socket {
    return (this.ws as unknown as { _socket: Socket })._socket;
  }

  request<T = any>(method: string, params: object = {}): Promise<T> {
    if (this.closedError) return Promise.reject(this.closedError);
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { method, resolve, reject });
      this.ws.send(JSON.stringify({ id, method, params }));
    });
  }

  notify(method: string, params: object = {}): void {
    this.ws.send(JSON.stringify({ method, params }));
  }

  /** Routes `process/output|exited|closed` for one process id to `handler` (replacing any). */
  onProcess(processId: string, handler: ProcessEventHandler): void {
    this.processHandlers.set(processId, handler);
  }

  offProcess(processId: string): void {
    this.processHandlers.delete(processId);
  }

  close(): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return Promise.resolve();
    return new Promise((resolve) => {
      this.ws.once('close', () => resolve());
      this.ws.close();
      setTimeout(() => {
        this.ws.terminate();
        resolve();
      }, 1_000).unref();
    });
  }

  private onMessage(data: Buffer): void {
    const message = JSON.parse(data.toString('utf8'));
    if (typeof message.method === 'string' && message.id === undefined) {
      const processId = message.params?.processId;
      if (typeof processId === 'string') this.processHandlers.get(processId)?.(message.method, message.params);
      return;
    }
    const pending = this.pending.get(message.id);
    if (!pending) return;
    this.pending.delete(message.id);
    if (message.error) pending.reject(new RpcCallError(pending.method, message.error.code, message.error.message));
    else pending.resolve(message.result);
  }

  private failAll(error: Error): void {
    this.closedError ??= error;
    for (const { reject } of this.pending.values()) reject(error);
    this.pending.clear();
  }
}

/** The `process/start` params both servers accept (all required fields present). */
export function startParams(processId: string, argv: string[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    processId,
    argv,
    cwd: `file://${process.cwd()}`,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    tty: false,
    ...extra,
  };
}
