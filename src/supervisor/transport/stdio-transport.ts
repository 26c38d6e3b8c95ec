/**
 * A local stdio MCP server as the supervisor needs it: the SDK's StdioClientTransport
 * contract (same parameters, `stderr` available before start(), `pid`, the same close
 * sequence), plus what a supervisor must know and own:
 *
 * - The server runs in a process group of its own, and every way it ends (close(), an
 *   abandoned attempt, a crash) sweeps that whole group: a `sh -c` wrapper or an `npx`
 *   launcher cannot leave its real server behind as an orphan.
 * - How it ended (`exitInfo`): "exited with code 3" explains more than "Connection closed".
 * - A stdout line that is not JSON-RPC is reported through onerror with the line (the
 *   framing of src/mcp), so a server that logs a banner to stdout can be told so.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { PassThrough, type Readable } from 'node:stream';
import { getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { JsonRpcLineDecoder, serializeMessage } from '../../mcp/framing.js';
import { settleWithin } from '../../util/timeouts.js';

export interface LocalStdioParameters {
  command: string;
  args?: string[];
  /** Laid over the SDK's default environment (HOME, PATH, USER…), as the SDK does. */
  env?: Record<string, string>;
  cwd?: string;
  /** Milliseconds for each step of close() (stdin EOF, then SIGTERM, then SIGKILL). Default 1500. */
  closeStepMs?: number;
}

/** How a server process ended. */
export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export class LocalStdioClientTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: <T extends JSONRPCMessage>(message: T) => void;

  exitInfo: ExitInfo | null = null;

  private child: ChildProcess | undefined;
  private readonly stderrStream = new PassThrough();
  private readonly decoder = new JsonRpcLineDecoder();
  private closing: Promise<void> | undefined;
  private closed = false;
  private finished = false;
  private exited!: Promise<void>;

  constructor(private readonly params: LocalStdioParameters) {}

  /** The server's stderr (piped; available before start()). */
  get stderr(): Readable {
    return this.stderrStream;
  }

  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  async start(): Promise<void> {
    if (this.child) throw new Error('LocalStdioClientTransport already started');
    const child = spawn(this.params.command, this.params.args ?? [], {
      env: { ...getDefaultEnvironment(), ...this.params.env },
      cwd: this.params.cwd,
      stdio: ['pipe', 'pipe', 'pipe'],
      // Its own process group, so that ending it ends everything it started.
      detached: true,
      shell: false,
    });
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    }).catch((err: Error) => {
      // A failed start rejects start() and never fires onclose (as the SDK's transport).
      this.finished = true;
      this.closed = true;
      throw err;
    });
    child.on('error', (err) => this.onerror?.(err));
    child.once('exit', (code, signal) => {
      this.exitInfo = { code, signal };
      // Whatever it left running in its group goes with it (and with them the pipes they
      // hold, so 'close' follows).
      killGroup(child, 'SIGKILL');
    });
    // After 'exit' and the end of stdout: what it wrote before exiting is delivered first.
    child.once('close', () => this.finish());
    child.stdout!.on('data', (chunk: Buffer) => this.onStdout(chunk));
    child.stdout!.on('error', (err) => this.onerror?.(err));
    child.stdin!.on('error', (err) => this.onerror?.(err));
    child.stderr!.pipe(this.stderrStream);
  }

  private onStdout(chunk: Buffer): void {
    let results;
    try {
      results = this.decoder.push(chunk);
    } catch (err) {
      this.onerror?.(err as Error);
      return;
    }
    for (const r of results) {
      if (r.ok) this.onmessage?.(r.message);
      else this.onerror?.(r.error);
    }
  }

  async send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.child?.stdin;
    if (!stdin || this.closed || !stdin.writable) throw new Error('Not connected');
    await new Promise<void>((resolve, reject) => {
      stdin.write(serializeMessage(message), (err) => (err ? reject(err) : resolve()));
    });
  }

  /** stdin EOF, then SIGTERM to the group, then SIGKILL to the group: each step waits closeStepMs. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      const child = this.child;
      if (child && this.exitInfo === null) {
        const step = this.params.closeStepMs ?? 1500;
        try {
          child.stdin?.end();
        } catch {
          // already gone
        }
        if (!(await settleWithin(this.exited, step))) {
          killGroup(child, 'SIGTERM');
          if (!(await settleWithin(this.exited, step))) {
            killGroup(child, 'SIGKILL');
            await settleWithin(this.exited, step);
          }
        }
      }
      if (child) killGroup(child, 'SIGKILL');
      this.decoder.clear();
      this.finish();
    })();
    return this.closing;
  }

  /** Ends the whole group at once (shutdown past its deadline). */
  kill(): void {
    if (this.child) killGroup(this.child, 'SIGKILL');
  }

  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    this.closed = true;
    this.onclose?.();
  }
}

/** Signals the child's process group (the child leads it); quiet when it is gone already. */
function killGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // ESRCH: nothing left in the group
  }
}

/** "server process exited with code 3" / "server process killed by SIGKILL", or null. */
export function describeExit(transport: unknown): string | null {
  const info = (transport as { exitInfo?: ExitInfo | null }).exitInfo;
  if (!info) return null;
  return info.signal ? `server process killed by ${info.signal}` : `server process exited with code ${info.code}`;
}
