/**
 * tether's negotiated protocol extensions (docs/protocol.md, "Extensions").
 *
 * A tether client asks for extensions in `initialize`:
 *   `{clientName, resumeSessionId?, tether: {version: 1, extensions: ["acks", ...]}}`
 * and the server answers with the subset it accepted:
 *   `{sessionId, environmentInfo, tether: {version: 1, extensions: ["acks"]}}`.
 * A client that does not ask (every Codex client) gets no `tether` member and the Codex
 * dialect byte for byte; a Codex server ignores the unknown param and answers without
 * `tether`, which the tether client reads as "nothing accepted" and falls back.
 *
 * The accepted set is fixed for the session's life: a resume must ask for the same set
 * (anything else is -32602), so neither side ever has to reason about a session whose
 * rules changed halfway.
 *
 * To add an extension: add its name to `KnownExtensions` (with a comment saying what it
 * changes), document it in docs/protocol.md, and check `session.extensions.has(name)` (server)
 * or `client.extensions.has(name)` (client) where behaviour differs.
 */
export const EXTENSIONS_VERSION = 1;

/** Every extension this build understands. */
export const KnownExtensions = [
  /** `session/close`: a client that is done ends its session at once (nothing lingers detached). */
  'sessionClose',
  /**
   * `session/list`: the sessions of the caller's token and their processes (`tether ps`);
   * every session for the server's admin token.
   */
  'sessionList',
  /**
   * fs requests through drops: file handles and the missing-watch belong to the session (they
   * survive a reconnect, are closed on expiry) and mutating fs requests may carry an
   * `idempotencyKey`, answered from the server's memory when re-sent.
   */
  'fsResume',
  /**
   * `process/resize`: a tty process's terminal follows the client's (`tether exec --tty` on
   * every SIGWINCH), and `process/start` takes its initial size (`terminalSize`).
   */
  'processResize',
  /**
   * `acks`: the client acknowledges what it consumed (`process/ack {processId, seq}`); the
   * server evicts only acknowledged output, stops reading a child at `outputWindow`
   * unacknowledged bytes, and a resume says where each process stands (`delivered`).
   */
  'acks',
  /**
   * `process/start` failures carry `data: {stage, code}`: whether the working directory
   * (`cwd`) or the program (`exec`) failed, and the errno name, so a client can tell the two
   * apart without parsing the message (which, from tether, names the program or the
   * directory whatever the extensions: "cannot start 'prog': cwd '/x': No such file…").
   */
  'startErrorDetail',
  /**
   * `binaryOutput`: process output travels as binary WebSocket frames (a 16-byte header, then
   * the raw bytes: protocol/binary-frames.ts) addressed by a numeric `handle` that
   * `process/start` returns; the client may acknowledge in binary too. Everything else stays JSON.
   */
  'binaryOutput',
  /**
   * `fsWritten`: `fs/writeBlock` may carry a client-chosen `writeId`, and `fs/written` says
   * which of the given ids completed on a handle, so after a drop a client re-sends only the
   * blocks the server does not already hold (instead of every block that was in flight).
   */
  'fsWritten',
  /**
   * `sessionKeep`: the client asks in `initialize` (`tether.keepMs`) how long its session
   * should outlive a drop; the server grants that within its limits (at least its session TTL,
   * at most its maximum) and answers what it granted (`keepMs`) and its maximum (`keepMaxMs`).
   */
  'sessionKeep',
  /**
   * `keepLast`: `process/start` may carry `keepLastBytes`: at that many unacknowledged bytes
   * (or when its output can neither stay in memory nor spill), the server drops the process's
   * OLDEST unacknowledged output instead of pausing it, and says so with a `process/gap`
   * notification (`{processId, firstSeq, lastSeq, bytes, reason: "keep-last"}`) before the next
   * event it sends; told again after a reconnect until the client acknowledges past it.
   */
  'keepLast',
  /**
   * `attach` (detach, attach and watch): a new session may be named (`tether.name`, unique
   * among its token's live sessions); `tether.attach {session, role, take?}` attaches to a
   * session by id or name as its writer (a resume; `take` moves a live writer, which is told
   * `session/writer` and becomes a watcher) or as a read-only watcher (`process/read` from any
   * seq, never acknowledging; `session/watch`); the answer says what is there (`tether.attached`).
   */
  'attach',
] as const;

export type ExtensionName = (typeof KnownExtensions)[number];

const known: ReadonlySet<string> = new Set(KnownExtensions);

export function isKnownExtension(name: string): name is ExtensionName {
  return known.has(name);
}

/**
 * The `tether` member of `initialize` params (validated by `TetherInitializeSchema` in
 * schemas.ts: this file stays free of zod, so a client does not load it). Unknown extension
 * names are ignored, not refused.
 */
export interface TetherInitialize {
  version: number;
  extensions: string[];
  /**
   * `acks`, on a resume: per process id, the last seq the client delivered (it may be past
   * what it acknowledged). The server sends each process's events from the next one on.
   */
  delivered?: Record<string, number> | null;
  /**
   * `sessionKeep`: how long (ms) the session should outlive a drop. Asked at creation and on
   * every resume (each grant replaces the last); absent: the server's session TTL at creation,
   * the last grant on a resume.
   */
  keepMs?: number | null;
  /** `attach`, on a new session: its name (1..64 of `[A-Za-z0-9._-]`, not shaped like a UUID), unique among its token's live sessions. */
  name?: string | null;
  /** `attach`: attach to an existing session (by full id or name) instead of creating or resuming one. */
  attach?: AttachRequest | null;
}

/** Why `name` cannot name a session (extension `attach`): 1..64 of `[A-Za-z0-9._-]`, never UUID-shaped (an id); null when it can. */
export function invalidSessionName(name: string): string | null {
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(name)) return 'must be 1 to 64 characters of A-Z a-z 0-9 . _ -';
  if (/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(name)) return 'must not look like a session id (a UUID)';
  return null;
}

/** `tether.attach` of `initialize` (extension `attach`). */
export interface AttachRequest {
  /** The session's full id, or its name. */
  session: string;
  /** `writer`: the session's connection (a resume); `watcher`: a read-only connection that pulls its output. */
  role: AttachRole;
  /** Writer only: move the writer from a live connection (which becomes a watcher) instead of being refused. */
  take?: boolean | null;
}

export type AttachRole = 'writer' | 'watcher';

/** A process as an attacher sees it (`tether.attached.processes`, `session/watch`). */
export interface AttachedProcess {
  processId: string;
  argv: string[];
  tty: boolean;
  state: 'running' | 'exited';
  exitCode: number | null;
  /** The seq its next event will get. */
  nextSeq: number;
  /** The last seq the session's writer acknowledged (`acks`; without them what it was sent). */
  ackedSeq: number;
  /** `binaryOutput`: the handle its output frames carry (chosen by the client that started it). */
  handle?: number;
}

/** `tether.attached` of the `initialize` result (extension `attach`). */
export interface AttachedSession {
  /** The full session id. */
  sessionId: string;
  name?: string;
  role: AttachRole;
  processes: AttachedProcess[];
}

/** `session/watch` result (extension `attach`): the session's processes now. */
export interface SessionWatchResult {
  processes: AttachedProcess[];
}

/** `session/writer` notification (extension `attach`): this connection is no longer the session's writer. */
export interface SessionWriterNotification {
  writer: false;
  /** `taken`: another connection attached as the writer with `take`; this one now watches. */
  reason: 'taken';
}

/**
 * `session/ended` notification (extension `attach`), to each watcher just before the server
 * closes its connection because the watched session ended: what became of each process, so
 * a watcher can say exactly what it did not read (seqs after its last, below `nextSeq`).
 */
export interface SessionEndedNotification {
  /** `closed`: its writer closed it (`session/close`); `expired`: its TTL ran out while detached; `ended`: anything else (the server stops). */
  reason: 'closed' | 'expired' | 'ended';
  /** `exitCode` null: it still ran, and the end killed it; `closed`: its close event is `nextSeq - 1` (its exit `nextSeq - 2`). */
  processes: { processId: string; exitCode: number | null; closed: boolean; nextSeq: number }[];
}

/** The `tether` member of the `initialize` result: what the server accepted. */
export interface TetherInitializeResult {
  version: number;
  extensions: ExtensionName[];
  /** With `acks`: unacknowledged output per process (bytes) at which the server stops reading it. */
  outputWindow?: number;
  /**
   * With `acks`, on a resume: processes named in `delivered` that the session no longer has
   * because a server restart could not keep them (restart adoption): id → why. Their remaining
   * events will never come.
   */
  lost?: Record<string, string>;
  /** With `sessionKeep`: how long (ms) the session outlives a drop, as granted for this `keepMs`. */
  keepMs?: number;
  /** With `sessionKeep`: the longest keep this server grants (`--max-session-ttl`); a larger ask got this. */
  keepMaxMs?: number;
  /** With `attach`, when the request attached (`tether.attach`): the session and its processes. */
  attached?: AttachedSession;
  /** With `attach`: the session's name, when it has one. */
  name?: string;
}

/** `data` of a `process/start` error under extension `startErrorDetail`. */
export interface StartErrorDetail {
  /** `cwd`: entering the working directory failed; `exec`: running the program; `setup`: anything before. */
  stage: 'cwd' | 'exec' | 'setup';
  /** The errno name: ENOENT, ENOTDIR, EACCES, ENOEXEC… */
  code: string;
}

/** The accepted set for a request: the known names it asks for, in a stable order. */
export function acceptExtensions(requested: TetherInitialize | null | undefined): ExtensionName[] {
  if (!requested) return [];
  const asked = new Set(requested.extensions);
  return KnownExtensions.filter((name) => asked.has(name));
}

/** Order-insensitive equality of two accepted sets (a resume must ask for the same one). */
export function sameExtensions(a: Iterable<string>, b: Iterable<string>): boolean {
  const left = new Set(a);
  const right = new Set(b);
  if (left.size !== right.size) return false;
  for (const name of left) if (!right.has(name)) return false;
  return true;
}
