/**
 * Where the server's work is done, behind one interface so another back-end can be plugged in.
 *
 * The method handlers (methods.ts, fs/methods.ts, http-request.ts) keep everything that makes
 * them a server: parameter checks, the handshake state, limits and budgets, idempotency keys
 * remembered for the client, the client's dialect. What they ask a back-end for is only the
 * work: start a process, read or change a file, make an HTTP request, describe the host.
 *
 * The shape is per session, because a back-end may need state per client session (the relay's
 * remote back-end holds one upstream session for each downstream one):
 * - `ServerBackend.prepare` runs once before the server listens;
 * - `ServerBackend.openSession` is called when `initialize` creates a session, and gives the
 *   `SessionBackend` its handlers use for as long as the session lives;
 * - `SessionBackend.close` is called once the session has expired or was closed.
 * A back-end whose session is lost underneath it (an upstream session expired) calls the
 * `lost` hook it was given: the server then expires the session, so its client hears what a
 * Codex server says for an unknown session or process.
 *
 * What a child is, started or adopted, is child.ts. The local back-end (local/local-backend.ts)
 * is what `tether serve` runs: every command under its own local `tether-keeper`, node:fs,
 * node:http, this machine's description. Nothing here loads native code at import; the local
 * `prepare` does, when a server starts.
 */
import type { EnvironmentConfigReadResult, EnvironmentInfo, ExtensionName } from '../../protocol/index.js';
import type { FsWork } from './fs-work.js';
import type { HttpRequestWork, HttpResponseLike } from './http-work.js';
import type { ChildEvents, ChildSpec, SpawnedChild } from './child.js';

export type { ChildEvents, ChildSpec, SpawnedChild } from './child.js';
export type { HttpRequestWork, HttpResponseLike } from './http-work.js';
export type { FsTarget, FsWork } from './fs-work.js';

export interface ServerBackend {
  /** Readies the back-end before the server listens; throws (one line) when it cannot do its work. */
  prepare(): void;
  /**
   * The tether extensions this back-end can carry (null: all of them). The server accepts
   * nothing else from its clients: a relay offers only what its upstream negotiated.
   */
  readonly extensions: ReadonlySet<ExtensionName> | null;
  /** The work side of a new session; `lost` expires the session (its work can no longer be done). */
  openSession(session: { readonly id: string; readonly extensions: ReadonlySet<ExtensionName> }, lost: (reason: string) => void): SessionBackend;
}

/** The work of one session: processes, files, HTTP, the host's description. */
export interface SessionBackend {
  /**
   * Starts a child (rejects with an RpcError naming what failed, leaving nothing behind); its
   * events reach `events` only after the microtasks that follow the resolution (local/spawn.ts).
   */
  spawn(spec: ChildSpec, events: ChildEvents): Promise<SpawnedChild>;
  readonly fs: FsWork;
  /** Sends one HTTP request (redirects followed as asked); the response's body is read by the caller. */
  httpRequest(request: HttpRequestWork): Promise<HttpResponseLike>;
  /** `environment/info` (and `initialize`'s `environmentInfo`): known at once (a relay learns it from its upstream first). */
  environmentInfo(): EnvironmentInfo;
  /** `environmentConfig/read`, its params checked. */
  environmentConfig(configPaths: string[][], requirementsPaths: string[][], cwd: string): Promise<EnvironmentConfigReadResult>;
  /** The session is gone (expired or closed): free what it holds. */
  close(): void;
}
