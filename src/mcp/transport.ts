/**
 * `ExecStdioClientTransport`: the MCP SDK's `StdioClientTransport`, but the server process
 * runs on a tether (or Codex exec-server) host, over a session that survives link drops.
 *
 * The SDK rejects every pending request with "Connection closed" the moment a transport
 * closes, and a Client cannot be moved to a new transport. So the drop has to be hidden one
 * layer below MCP: the remote process keeps running while the link is down, the ExecClient
 * reconnects and replays missed output by sequence number, and stdin writes carry
 * idempotent write ids. This class only frames JSON-RPC over that process's stdio, and
 * reports the end of the process (or of the session) as the end of the transport.
 *
 * Conventions copied from the SDK's stdio transport so that swapping one for the other
 * changes nothing for the caller: the same constructor fields (`command`, `args`, `env`,
 * `cwd`, `stderr`), `start()` resolves once the process runs, `stderr` is a PassThrough
 * available before `start()` when `stderr: 'pipe'`, `close()` ends stdin, waits 2 s, sends
 * SIGTERM, waits 2 s, kills; a bad line is reported and skipped; an oversized message
 * errors and closes.
 */
import { PassThrough, type Readable } from 'node:stream';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { ExecClient, type ExecProcess, type StateChange, type TrustedCa } from '../client/index.js';
import { JsonRpcLineDecoder, MessageTooLargeError, serializeMessage } from './framing.js';
import { Inbox } from './inbox.js';
import { settleWithin, withTimeout } from '../util/timeouts.js';
import { isEnded } from '../client/engine.js';

export type StderrMode = 'pipe' | 'inherit' | 'ignore';

export interface ExecStdioServerParameters {
  /** The executable to run on the remote host (looked up in the remote PATH). */
  command: string;
  args?: string[];
  /**
   * Variables for the remote process, laid over the remote host's core environment (HOME,
   * LOGNAME, PATH, SHELL, USER, USERNAME, TMPDIR, TEMP, TMP): the remote counterpart of the
   * SDK's `getDefaultEnvironment()` merge. Nothing of the local environment is sent.
   */
  env?: Record<string, string>;
  /** Remote working directory (absolute path or file:// URI); default the server's cwd. */
  cwd?: string;
  /** As in the SDK: 'inherit' (default) copies it to this process's stderr. */
  stderr?: StderrMode;
  /** tether server URL (ws://…): the transport opens, and on close closes, its own client. */
  url?: string;
  token?: string;
  /** For wss://: CA certificate(s) to trust (PEM), as `ExecClientOptions.ca`. */
  ca?: TrustedCa;
  /** An existing client to run on (it is not closed by the transport). */
  client?: ExecClient;
  clientName?: string;
  /**
   * The session's name, for the client it opens (`ExecClientOptions.name`): `tether attach
   * --watch NAME` then shows the server's stdout and stderr live, read-only (docs/attach.md).
   */
  sessionName?: string;
  recoveryDeadlineMs?: number;
  /** Passed to the client it opens: how soon an unanswered ping means a dead link (10 s). */
  keepaliveTimeoutMs?: number;
  /** Largest JSON-RPC message accepted from the server; default the SDK's 10 MB. */
  maxMessageBytes?: number;
}

/** The remote MCP server process ended while the transport was open. */
export class ServerProcessExitedError extends Error {
  override readonly name = 'ServerProcessExitedError';
  constructor(
    readonly exitCode: number,
    readonly stderrTail: string,
  ) {
    const tail = stderrTail.trim();
    super(
      `remote MCP server process exited with code ${exitCode}` +
        (tail ? `; its last stderr output:\n${tail}` : ' (it wrote nothing to stderr)'),
    );
  }
}

/** How long each step of close() waits, as the SDK's StdioClientTransport does. */
const CLOSE_STEP_MS = 2000;
/** How much of the server's stderr is kept to explain an unexpected exit. */
const STDERR_TAIL_BYTES = 4096;

export class ExecStdioClientTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: <T extends JSONRPCMessage>(message: T) => void;
  /**
   * The tether link's state changes (`recovering`, `connected`, `failed`, `closed`), which the
   * MCP Client never sees. Set it before `connect()`: it is attached to the client as soon as
   * there is one (the transport's own, opened in `start()`, or the one it was given), and
   * detached when the transport has closed.
   */
  onstate?: (change: StateChange) => void;

  private readonly params: ExecStdioServerParameters;
  private readonly decoder: JsonRpcLineDecoder;
  private readonly stderrStream: PassThrough | null;
  private execClient: ExecClient | undefined;
  private readonly ownsClient: boolean;
  private process: ExecProcess | undefined;
  private starting: Promise<void> | undefined;
  private closing: Promise<void> | undefined;
  private finished = false;
  private exitCode: number | undefined;
  private stderrTail = '';
  /** Resolves when the remote process has closed or can no longer be reached. */
  private ended!: Promise<void>;
  private markEnded!: () => void;
  private detachState: () => void = () => {};

  /** What reaches the SDK, in order (inbox.ts). */
  private readonly inbox = new Inbox({ message: (message) => this.onmessage?.(message), error: (error) => this.report(error) });

  constructor(params: ExecStdioServerParameters) {
    if (typeof params?.command !== 'string' || params.command === '') {
      throw new TypeError('ExecStdioClientTransport: `command` must be a non-empty string');
    }
    if (!params.client && !params.url) {
      throw new TypeError('ExecStdioClientTransport: give either `url` (a tether server, ws://…) or an existing `client`');
    }
    const stderr = params.stderr ?? 'inherit';
    if (!['pipe', 'inherit', 'ignore'].includes(stderr)) {
      throw new TypeError(`ExecStdioClientTransport: \`stderr\` must be 'pipe', 'inherit' or 'ignore' (got ${String(stderr)})`);
    }
    this.params = { ...params, stderr };
    this.decoder = new JsonRpcLineDecoder(params.maxMessageBytes);
    this.execClient = params.client;
    this.ownsClient = !params.client;
    // Like the SDK: the stream exists before start(), so early output cannot be missed.
    this.stderrStream = stderr === 'pipe' ? new PassThrough() : null;
    this.ended = new Promise((resolve) => (this.markEnded = resolve));
  }

  /** The remote process's stderr when `stderr: 'pipe'` (available before start()), else null. */
  get stderr(): Readable | null {
    return this.stderrStream;
  }

  /** The ExecClient underneath (its 'state' events tell when the link is recovering). */
  get client(): ExecClient | undefined {
    return this.execClient;
  }

  /** The remote process id (tether's, chosen by the client), once started. */
  get processId(): string | null {
    return this.process?.id ?? null;
  }

  async start(): Promise<void> {
    if (this.starting) {
      throw new Error(
        'ExecStdioClientTransport already started! If using Client class, note that connect() calls start() automatically.',
      );
    }
    this.starting = this.launch();
    return this.starting;
  }

  private async launch(): Promise<void> {
    try {
      if (!this.execClient) {
        this.execClient = await ExecClient.connect(this.params.url!, {
          token: this.params.token,
          ca: this.params.ca,
          clientName: this.params.clientName ?? 'tether-mcp',
          ...(this.params.sessionName !== undefined ? { name: this.params.sessionName } : {}),
          recoveryDeadlineMs: this.params.recoveryDeadlineMs,
          keepaliveTimeoutMs: this.params.keepaliveTimeoutMs,
        });
      }
      const client = this.execClient;
      const onState = (change: StateChange) => this.onstate?.(change);
      const onWriterLost = () => this.writerTaken();
      client.on('state', onState);
      client.on('writer-lost', onWriterLost);
      this.detachState = () => {
        client.off('state', onState);
        client.off('writer-lost', onWriterLost);
      };
      if (isEnded(client.state)) throw new Error('ExecStdioClientTransport: the tether client has already failed');
      const proc = client.spawn([this.params.command, ...(this.params.args ?? [])], {
        cwd: this.params.cwd,
        env: this.params.env ?? {},
        envPolicy: { inherit: 'core', ignoreDefaultExcludes: false, exclude: [], set: {}, includeOnly: [] },
        pipeStdin: true,
      });
      this.process = proc;
      this.wire(proc);
      await new Promise<void>((resolve, reject) => {
        const onSpawn = () => {
          proc.off('error', onError);
          resolve();
        };
        const onError = (error: Error) => {
          proc.off('spawn', onSpawn);
          reject(error);
        };
        proc.once('spawn', onSpawn);
        proc.once('error', onError);
      });
    } catch (error) {
      const err = asError(error);
      // As the SDK does for a spawn failure: reject start() and report it.
      this.onerror?.(err);
      this.finishQuietly();
      throw err;
    }
  }

  private wire(proc: ExecProcess): void {
    proc.stdout.on('data', (chunk: Buffer) => this.onStdout(chunk));
    proc.stdout.on('error', (error: Error) => this.report(error));
    proc.stdin?.on('error', (error: Error) => this.report(error));

    proc.stderr.on('data', (chunk: Buffer) => this.keepStderrTail(chunk));
    proc.stderr.on('error', (error: Error) => this.report(error));
    if (this.stderrStream) proc.stderr.pipe(this.stderrStream);
    else if (this.params.stderr === 'inherit') proc.stderr.pipe(process.stderr, { end: false });

    proc.on('exit', (code: number) => {
      this.exitCode = code;
    });
    proc.on('close', () => {
      this.markEnded();
      const unexpected = !this.closing && this.exitCode !== undefined && this.exitCode !== 0;
      void this.finish(unexpected ? new ServerProcessExitedError(this.exitCode!, this.stderrTail) : undefined);
    });
    // SessionLostError (the client is Failed) or OutputLostError (output evicted while the
    // link was down, so the JSON-RPC stream has a hole): either way this MCP session is over.
    proc.once('spawn', () => {
      this.spawned = true;
    });
    proc.on('error', (error: Error) => {
      if (!this.spawned || this.finished) return; // before 'spawn', start() reports it
      // Output lost but the session alive: the process still runs, so stop it.
      // (proc.terminate() is a no-op on a failed handle: ask the server directly.)
      const client = this.execClient;
      if (client && !isEnded(client.state)) void client.request('process/terminate', { processId: proc.id }).catch(() => {});
      this.markEnded();
      void this.finish(error);
    });
  }

  private spawned = false;

  /**
   * Another attachment took the session's writer (`tether attach --take`): what the remote
   * server writes from now on answers the taker, not this MCP session, and this client can
   * no longer write. Nothing more is delivered (the taker's answers must not reach the SDK
   * as ours); pending requests fail and the transport closes at once. The process runs on,
   * the taker's.
   */
  private writerTaken(): void {
    if (this.finished || this.taken) return;
    this.taken = true;
    if (this.stderrStream && this.process) this.process.stderr.unpipe(this.stderrStream);
    else this.process?.stderr.unpipe(process.stderr);
    void this.finish(new Error('the tether session was taken by another attachment (tether attach --take): this MCP session ends here; the remote server runs on'), { now: true });
  }

  private taken = false;

  private onStdout(chunk: Buffer): void {
    if (this.taken) return;
    let results;
    try {
      results = this.decoder.push(chunk);
    } catch (error) {
      // Too large to resynchronise: report and close, as the SDK does.
      this.report(error instanceof MessageTooLargeError ? error : asError(error));
      void this.close().catch(() => {});
      return;
    }
    const messages: JSONRPCMessage[] = [];
    for (const r of results) {
      if (r.ok) messages.push(r.message);
      else this.report(r.error);
    }
    if (messages.length) this.inbox.deliver(messages);
  }

  private keepStderrTail(chunk: Buffer): void {
    this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
  }

  private report(error: Error): void {
    if (this.finished) return;
    this.onerror?.(error);
  }

  async send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.process?.stdin;
    if (!stdin || this.finished || this.closing) throw new Error('Not connected');
    const requestId = 'method' in message && 'id' in message ? message.id : undefined;
    if (requestId !== undefined) this.inbox.sent(requestId);
    const line = serializeMessage(message);
    // Resolves once the write is accepted by the remote side (after a reconnect if the link
    // is down: the client re-sends it with the same write id, so it lands exactly once).
    await new Promise<void>((resolve, reject) => {
      stdin.write(line, (error?: Error | null) => {
        if (!error) return resolve();
        // The SDK fails the request with this error; it must not be answered again later.
        if (requestId !== undefined) this.inbox.unsent(requestId);
        reject(error);
      });
    });
  }

  /**
   * End stdin, give the server 2 s to exit, then SIGTERM, 2 s, then kill: the SDK's
   * sequence for a local stdio server. Codex exec-servers accept only "interrupt"
   * signals, so there the SIGTERM step is skipped for the kill.
   */
  async close(): Promise<void> {
    if (this.closing) return this.closing;
    this.closing = (async () => {
      if (this.starting) await this.starting.catch(() => {});
      const proc = this.process;
      if (proc && !this.finished) {
        try {
          proc.stdin?.end();
        } catch {
          // already ended or destroyed: the waits below still apply
        }
        if (!(await this.endedWithin(CLOSE_STEP_MS))) {
          let termSent = false;
          try {
            await withTimeout(proc.signal('terminate'), CLOSE_STEP_MS);
            termSent = true;
          } catch {
            // not supported by this server (Codex), or the link is down
          }
          if (!termSent || !(await this.endedWithin(CLOSE_STEP_MS))) {
            await withTimeout(proc.terminate(), CLOSE_STEP_MS).catch(() => {});
            await this.endedWithin(CLOSE_STEP_MS);
          }
        }
      }
      await this.finish();
      this.decoder.clear();
    })();
    return this.closing;
  }

  private endedWithin(ms: number): Promise<boolean> {
    return settleWithin(this.ended, ms);
  }

  /** Fires onerror (if given) then onclose, exactly once, after every message is delivered. */
  private finish(error?: Error, { now = false } = {}): Promise<void> {
    if (!this.finishing) {
      this.finished = true;
      this.finishing = (async () => {
        // 'close' and 'error' can come before the stdout stream has emitted what it
        // buffered: what the server wrote still reaches onmessage, then onclose. (Not after
        // a take: the process runs on, for the taker.)
        if (this.process && !now) await whenEnded(this.process.stdout);
        await this.inbox.idle;
        if (error) {
          this.onerror?.(error);
          this.inbox.failPending(error);
        }
        this.inbox.close();
        this.onclose?.();
        if (this.ownsClient && this.execClient) await this.execClient.close().catch(() => {});
        this.detachState();
      })();
    }
    return this.finishing;
  }

  private finishing: Promise<void> | undefined;

  /** After a failed start: release what was acquired without firing onclose. */
  private finishQuietly(): void {
    this.finished = true;
    this.finishing = Promise.resolve();
    this.markEnded();
    if (this.ownsClient && this.execClient) void this.execClient.close().catch(() => {}).finally(() => this.detachState());
    else this.detachState();
  }
}

/** Resolves once a readable has emitted 'end' (or can never emit more). */
function whenEnded(stream: Readable): Promise<void> {
  if (stream.readableEnded || stream.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    stream.once('end', resolve);
    stream.once('close', resolve);
    stream.once('error', resolve);
  });
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

