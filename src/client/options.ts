/**
 * What an `ExecClient` is given: its options at `connect` (`ExecClientOptions`) and the
 * options of one `spawn` (`SpawnOptions`). The facade (client.ts) and its parts
 * (session-link.ts, process/process-ops.ts) read them from here; `checkConnectOptions`
 * refuses what `connect` cannot use.
 */

import type { Writable } from 'node:stream';
import type { ExtensionName } from '../protocol/extensions.js';
import type { EnvPolicy } from '../protocol/types.js';
import type { Logger } from '../util/logger.js';
import type { TrustedCa } from './connection.js';
import { invalidSessionName, type AttachedProcess } from './attach/attach-wire.js';
import { invalidDuration } from '../util/timeouts.js';

export interface ExecClientOptions {
  /** Bearer token for the WebSocket upgrade. */
  token?: string;
  /**
   * For `wss://` servers whose certificate is not signed by a CA Node trusts (a self-signed
   * or private CA): the CA certificate(s), PEM. Node's `NODE_EXTRA_CA_CERTS` works too.
   */
  ca?: TrustedCa;
  /** Sent in `initialize` (default "tether-client"). */
  clientName?: string;
  /** How long a recovery may take, from the drop, before the session counts as lost (25 s). */
  recoveryDeadlineMs?: number;
  /** Client ping period (default: a third of the timeout, at most 5 s). 0 turns the keepalive off. */
  keepaliveIntervalMs?: number;
  /** An unanswered ping older than this means a dead link and starts a recovery (10 s). */
  keepaliveTimeoutMs?: number;
  /** Aborting closes the client (or cancels `connect`). */
  signal?: AbortSignal;
  /** Send `jsonrpc: "2.0"` on every message (default true; both dialects are accepted in). */
  jsonrpc?: boolean;
  /**
   * Flow control against a server without the `acks` extension (a Codex exec-server; with
   * acks every process is flow-controlled on its own and this is not used). Off by default:
   * when a consumed output stream (one with a reader: piped,
   * 'data' listener, iterated) holds more than this many unread bytes, the client stops
   * reading the socket until it drains to half, so a slow consumer slows the remote process
   * (tether pauses its children) instead of growing memory. Streams nobody reads never
   * count. The whole session waits meanwhile, so read every stream you consume.
   */
  outputHighWaterMark?: number;
  /**
   * tether protocol extensions to ask for (default: every one this build knows). The server
   * accepts the ones it knows; a Codex server accepts none, and the client falls back to the
   * Codex dialect. `[]` never asks (the Codex dialect against any server). See `extensions`.
   */
  extensions?: readonly ExtensionName[];
  /**
   * How long the session should outlive a drop on the server, ms (extension `sessionKeep`):
   * asked in `initialize` and again on every resume. The server grants at least its session
   * TTL and at most its `--max-session-ttl`; `client.sessionKeep` says what it granted.
   * Default: ask nothing (the server's session TTL, 30 s by default).
   */
  sessionKeepMs?: number;
  /** Diagnostics; logs go to the caller (tether's CLIs send them to stderr). */
  logger?: Logger;
  /**
   * The new session's name (extension `attach`): 1..64 characters of `[A-Za-z0-9._-]`, not
   * shaped like a UUID, unique among the live sessions of the token. `ExecClient.attach`
   * finds the session by it (as by its full id); `tether ps` shows it.
   */
  name?: string;
}

/** Throws a `TypeError` saying what `ExecClient.connect` (or `attach`) was given that it cannot use. */
export function checkConnectOptions(url: string, options: ExecClientOptions): void {
  if (options.name !== undefined) {
    const invalid = typeof options.name === 'string' ? invalidSessionName(options.name) : 'must be a string';
    if (invalid) throw new TypeError(`ExecClient.connect: name ${invalid} (got ${JSON.stringify(options.name)})`);
  }
  for (const key of ['recoveryDeadlineMs', 'keepaliveTimeoutMs', 'keepaliveIntervalMs', 'sessionKeepMs'] as const) {
    const value = options[key];
    const invalid = value === undefined ? null : invalidDuration(value);
    if (invalid) throw new TypeError(`ExecClient.connect: ${key} ${invalid} (got ${String(value)})`);
  }
  if (!/^wss?:\/\//i.test(url)) throw new TypeError(`ExecClient.connect: url must be a ws:// or wss:// URL (got '${url}')`);
}

/** What `ExecClient.attach` is given: the connection options, and how to attach. */
export interface AttachOptions extends Omit<ExecClientOptions, 'name'> {
  /**
   * `writer` (default): the session's process handles are full handles (stdin, signals,
   * resize), as if this client had started them, and it recovers through drops like the
   * session's creator. `watcher`: read-only handles; a watcher never slows the processes.
   */
  role?: 'writer' | 'watcher';
  /** A writer: take the session from the writer attached now (it is told, and watches on). */
  take?: boolean;
  /** Follow every process from its first event (what the server still holds) instead of from what the writer acknowledged. */
  fromStart?: boolean;
  /**
   * Where a process's output goes, as `spawn`'s `stdout`/`stderr` (written straight into the
   * stream; for a writer acknowledged once the write completed): asked once per process of
   * the session, and for a watcher once per process it finds later (`followNew`); `all` is
   * always the list of the session's processes as this client attached. Undefined leaves
   * its `stdout`/`stderr` streams to be read.
   */
  sinks?: (process: AttachedProcess, all: readonly AttachedProcess[]) => { stdout?: Writable; stderr?: Writable } | undefined;
  /**
   * A watcher: follow the processes the writer starts after it attached too (default true):
   * it polls the session (`session/watch`, every 500 ms, one request at a time) and each new
   * one gets a handle, in `processes()` and told by the client's 'process' event. False:
   * only the processes the session had when it attached. (A writer never polls.)
   */
  followNew?: boolean;
}

export interface SpawnOptions {
  /** Working directory: an absolute path, a `file://` URI, or a path relative to the server's cwd. Default: the server's cwd. */
  cwd?: string;
  /** Without `envPolicy`, exactly the child's environment. Default (neither given): the server's core variables (`envPolicy {inherit: "core"}`). */
  env?: Record<string, string>;
  /** Build the environment from the server's own, then lay `env` over it (docs/protocol.md, `process/start`). */
  envPolicy?: EnvPolicy | null;
  /** Run on a pseudo-terminal (all output arrives on `stdout`). */
  tty?: boolean;
  /** Give the process a stdin pipe (default false, as in the protocol; implied by `tty`). */
  pipeStdin?: boolean;
  /** Client-chosen id (default a random UUID); must be unique in the session. */
  processId?: string;
  /** With `tty`: the terminal's initial size (extension `processResize`; 80x24 without it). */
  terminalSize?: { cols: number; rows: number };
  /**
   * Keep only the newest this many bytes of output the client has not acknowledged: past it
   * the server drops the oldest instead of pausing the process, and the handle emits 'gap'
   * with the dropped seqs (extension `keepLast`; ignored by a server without it).
   */
  keepLast?: number;
  arg0?: string;
  /**
   * Write the process's stdout (all output with `tty`) straight into this stream, like
   * `child_process.spawn`'s `stdio` (e.g. `process.stdout`); `proc.stdout` then stays empty.
   * Output counts as consumed once the write's callback ran: a slow destination slows the
   * remote process. The stream is not ended.
   */
  stdout?: Writable;
  /** The same for stderr. */
  stderr?: Writable;
}
