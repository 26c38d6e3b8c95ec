/**
 * server/backend/: The back-end interface and the types it owns: where the server's work is done.
 * This file is the folder's only door: what other folders use of it, and nothing else.
 */
export type { ServerBackend, SessionBackend } from './backend.js';
export type { AdoptedChild, ChildEvents, ChildSpec, ChildStarter, KeepOptions, KeptChild, KeptDump, KeptStdin, SpawnedChild } from './child.js';
export type { FsScope, FsScopeLimits, FsScopeState, FsTarget, FsWork, KeptFsRecord, KeptWatchRecord, NativePath, OpenFileSlots } from './fs-work.js';
export { HttpTimeoutDefaults, RequestTimeouts } from './http-timeouts.js';
export type { HttpTimeoutLimits } from './http-timeouts.js';
export type { HttpRequestWork, HttpResponseLike } from './http-work.js';
