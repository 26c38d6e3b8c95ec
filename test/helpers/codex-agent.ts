/**
 * The real Codex agent (`codex app-server`, stdio JSON-RPC) as a client of an exec-server.
 * Codex 0.169 runs its tools on the exec-server named by `CODEX_EXEC_SERVER_URL`; the model
 * is a scripted fake on loopback (fake-model.ts), so a turn needs no login and no network.
 *
 * The app-server runs in its own process group so `stop()` takes down the `codex` launcher,
 * the native binary and anything either of them started.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { rmSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { ensureCodexInstalled, makeCodexHome } from './codex.js';

export interface CodexAgentOptions {
  /** The Codex release to run (default: CODEX_VERSION, TETHER_CODEX_VERSION or 0.169.0). */
  version?: string;
  /** Written to CODEX_HOME/environments.toml (0.171: exec-servers the agent may use, e.g. one it launches as a program). */
  environmentsToml?: string;
  /** ws:// URL of the exec-server Codex runs its commands on. Omit to let Codex run them locally. */
  execServerUrl?: string;
  /** Base URL of the fake Responses API (`FakeModel.baseUrl`, ends in /v1). */
  modelBaseUrl: string;
  /** Extra environment for the app-server process. */
  env?: Record<string, string>;
  /** Names removed from the inherited environment (e.g. markers only the exec-server may see). */
  unsetEnv?: string[];
  /** Diagnostic sink for stderr lines and unexpected messages (default: dropped). */
  log?: (line: string) => void;
  /** Per-request timeout (default 30 s). */
  requestTimeoutMs?: number;
}

export interface AppServerNotification {
  method: string;
  params: any;
}

/** A `ThreadItem` as the app-server reports it (only the fields tests look at are typed). */
export interface ThreadItem {
  type: string;
  id: string;
  [key: string]: any;
}

export interface CommandExecutionItem extends ThreadItem {
  type: 'commandExecution';
  command: string;
  status: string;
  aggregatedOutput: string | null;
  exitCode: number | null;
}

export interface TurnResult {
  turn: { id: string; status: string; error: unknown };
  /** Every item the turn completed, in order. */
  items: ThreadItem[];
  commandExecutions: CommandExecutionItem[];
  /** Output deltas per command item id, concatenated in arrival order. */
  commandOutputDeltas: Map<string, string>;
}

export class AppServerError extends Error {
  constructor(
    readonly method: string,
    readonly error: { code: number; message: string; data?: unknown },
  ) {
    super(`app-server ${method} failed: ${error.code} ${error.message}`);
    this.name = 'AppServerError';
  }
}

/** Minimal config: a custom provider on loopback, no approvals, no sandbox, nothing online. */
export function codexConfigToml(modelBaseUrl: string): string {
  return [
    'model = "fake-model"',
    'model_provider = "fake"',
    'approval_policy = "never"',
    'sandbox_mode = "danger-full-access"',
    '',
    '[model_providers.fake]',
    'name = "fake"',
    `base_url = "${modelBaseUrl}"`,
    'wire_api = "responses"',
    // A failed model call should fail the test, not be retried for minutes.
    'request_max_retries = 0',
    'stream_max_retries = 0',
    '',
    '[features]',
    // Plugins and apps reach for the network at startup.
    'plugins = false',
    'apps = false',
    '',
  ].join('\n');
}

export class CodexAgent extends EventEmitter {
  readonly notifications: AppServerNotification[] = [];
  /** Requests the app-server sent us (approvals etc.); answered with an error. */
  readonly serverRequests: Array<{ method: string; params: unknown }> = [];
  private nextId = 1;
  private readonly pending = new Map<number, { method: string; resolve: (v: any) => void; reject: (e: Error) => void }>();
  private readonly exited: Promise<void>;
  private stderrTail: string[] = [];

  private constructor(
    readonly child: ChildProcess,
    readonly home: string,
    private readonly options: CodexAgentOptions,
  ) {
    super();
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    child.once('exit', (code, signal) => {
      const error = new Error(`codex app-server exited (code ${code}, signal ${signal}); stderr tail:\n${this.stderrTail.join('\n')}`);
      for (const { reject } of this.pending.values()) reject(error);
      this.pending.clear();
      this.emit('exit', code, signal);
    });
    createInterface({ input: child.stdout! }).on('line', (line) => this.onLine(line));
    createInterface({ input: child.stderr! }).on('line', (line) => {
      this.stderrTail.push(line);
      if (this.stderrTail.length > 40) this.stderrTail.shift();
      options.log?.(`[app-server stderr] ${line}`);
    });
  }

  /** Starts `codex app-server` with a fresh CODEX_HOME and completes `initialize`/`initialized`. */
  static async start(options: CodexAgentOptions): Promise<CodexAgent> {
    const bin = ensureCodexInstalled(options.version);
    const home = makeCodexHome();
    writeFileSync(join(home, 'config.toml'), codexConfigToml(options.modelBaseUrl));
    if (options.environmentsToml !== undefined) writeFileSync(join(home, 'environments.toml'), options.environmentsToml);
    const env: Record<string, string> = {};
    for (const [key, value] of Object.entries(process.env)) {
      if (value !== undefined && !(options.unsetEnv ?? []).includes(key)) env[key] = value;
    }
    Object.assign(env, {
      CODEX_HOME: home,
      RUST_LOG: process.env.RUST_LOG ?? 'error',
      // Anything that tries to leave loopback over HTTP(S) hits a closed port and fails fast.
      HTTPS_PROXY: 'http://127.0.0.1:9',
      HTTP_PROXY: 'http://127.0.0.1:9',
      NO_PROXY: '127.0.0.1,localhost',
      ...options.env,
    });
    delete env.CODEX_EXEC_SERVER_URL;
    if (options.execServerUrl !== undefined) env.CODEX_EXEC_SERVER_URL = options.execServerUrl;
    const child = spawn(bin, ['app-server'], { env, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    const agent = new CodexAgent(child, home, options);
    try {
      await agent.request('initialize', {
        clientInfo: { name: 'tether-interop-test', title: null, version: '0.0.0' },
        capabilities: null,
      });
      agent.notify('initialized');
    } catch (error) {
      await agent.stop();
      throw error;
    }
    return agent;
  }

  request<T = any>(method: string, params?: unknown, timeoutMs = this.options.requestTimeoutMs ?? 30_000): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`app-server ${method} timed out after ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, {
        method,
        resolve: (value) => {
          clearTimeout(timer);
          resolve(value as T);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      });
      this.write({ id, method, params });
    });
  }

  notify(method: string, params?: unknown): void {
    this.write(params === undefined ? { method } : { method, params });
  }

  /** Resolves with the first notification (already received or future) that matches. */
  waitForNotification(predicate: (n: AppServerNotification) => boolean, timeoutMs: number, from = 0): Promise<AppServerNotification> {
    const seen = this.notifications.slice(from).find(predicate);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const onNotification = (n: AppServerNotification): void => {
        if (!predicate(n)) return;
        cleanup();
        resolve(n);
      };
      const onExit = (): void => {
        cleanup();
        reject(new Error(`codex app-server exited while waiting; stderr tail:\n${this.stderrTail.join('\n')}`));
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`no matching app-server notification within ${timeoutMs} ms; last: ${this.describeRecent()}`));
      }, timeoutMs);
      const cleanup = (): void => {
        clearTimeout(timer);
        this.off('notification', onNotification);
        this.off('exit', onExit);
      };
      this.on('notification', onNotification);
      this.once('exit', onExit);
    });
  }

  /** `thread/start` in `cwd`; returns the thread id. */
  async startThread(cwd: string): Promise<string> {
    const result = await this.request<{ thread: { id: string } }>('thread/start', { cwd });
    return result.thread.id;
  }

  /** `turn/start` with one text input, then collects items until `turn/completed`. */
  async runTurn(threadId: string, text: string, timeoutMs = 60_000): Promise<TurnResult> {
    const from = this.notifications.length;
    const started = await this.request<{ turn: { id: string } }>('turn/start', {
      threadId,
      input: [{ type: 'text', text, text_elements: [] }],
    });
    const turnId = started.turn.id;
    const done = await this.waitForNotification(
      (n) => n.method === 'turn/completed' && n.params?.turn?.id === turnId,
      timeoutMs,
      from,
    );
    const mine = this.notifications.slice(from).filter((n) => n.params?.turnId === turnId || n.params?.turn?.id === turnId);
    const items = mine.filter((n) => n.method === 'item/completed').map((n) => n.params.item as ThreadItem);
    const commandOutputDeltas = new Map<string, string>();
    for (const n of mine) {
      if (n.method !== 'item/commandExecution/outputDelta') continue;
      commandOutputDeltas.set(n.params.itemId, (commandOutputDeltas.get(n.params.itemId) ?? '') + n.params.delta);
    }
    return {
      turn: done.params.turn,
      items,
      commandExecutions: items.filter((item): item is CommandExecutionItem => item.type === 'commandExecution'),
      commandOutputDeltas,
    };
  }

  /** Kills the app-server's whole process group (SIGTERM, then SIGKILL after 3 s). */
  async stop(): Promise<void> {
    const pid = this.child.pid;
    if (pid !== undefined && this.child.exitCode === null && this.child.signalCode === null) {
      killGroup(pid, 'SIGTERM');
      const timer = setTimeout(() => killGroup(pid, 'SIGKILL'), 3_000);
      await this.exited;
      clearTimeout(timer);
    }
    // The launcher may exit before the native binary: make sure nothing in the group survives.
    if (pid !== undefined) killGroup(pid, 'SIGKILL');
    rmSync(this.home, { recursive: true, force: true });
  }

  private write(message: object): void {
    this.child.stdin!.write(`${JSON.stringify(message)}\n`);
  }

  private onLine(line: string): void {
    let message: any;
    try {
      message = JSON.parse(line);
    } catch {
      this.options.log?.(`[app-server stdout, not JSON] ${line}`);
      return;
    }
    if (message.id !== undefined && message.method !== undefined) {
      // A request from the server (approval, elicitation…): none is expected with
      // approval_policy = "never"; record it and refuse so the turn cannot hang on it.
      this.serverRequests.push({ method: message.method, params: message.params });
      this.options.log?.(`[app-server request] ${line.slice(0, 500)}`);
      this.write({ id: message.id, error: { code: -32601, message: 'not supported by the test client' } });
      return;
    }
    if (message.id !== undefined) {
      const pending = this.pending.get(message.id);
      if (!pending) return;
      this.pending.delete(message.id);
      if (message.error) pending.reject(new AppServerError(pending.method, message.error));
      else pending.resolve(message.result);
      return;
    }
    if (typeof message.method === 'string') {
      const notification = { method: message.method, params: message.params };
      this.notifications.push(notification);
      this.emit('notification', notification);
    }
  }

  private describeRecent(): string {
    return this.notifications
      .slice(-5)
      .map((n) => `${n.method} ${JSON.stringify(n.params).slice(0, 200)}`)
      .join(' | ');
  }
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // Already gone.
  }
}
