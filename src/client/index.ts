/**
 * The tether client: one logical exec-server client across connection generations,
 * exactly-once process I/O through drops (docs/protocol.md, "How a client recovers").
 */
export { ExecClient } from './client.js';
export type { ClientState, ExecClientEventMap, RecoveredEvent, RestartingEvent, SessionKeep, StateChange } from './client.js';
export type { AttachOptions, ExecClientOptions, SpawnOptions } from './options.js';
export type { AttachedProcess, AttachRole } from './attach/attach-wire.js';
export { ExecProcess } from './process/process.js';
export { RemoteFs, RemoteFileHandle, RemoteFsError, OutcomeUnknownError } from './fs/fs.js';
export type { PathLike, RemoteStats, RemoteDirent, WalkOptions, WalkResult } from './fs/fs.js';
export type { ExecProcessEventMap, KillSignal, OutputGapEvent, ProcessEvent } from './process/process.js';
export { SessionLostError, ServerStoppedError, OutputLostError, AuthRefusedError } from './errors.js';
export type { SessionLostReason } from './errors.js';
// What a failed request rejects with (a process/start refused, say): the server's JSON-RPC
// error, its code one of ErrorCode; `data` is StartErrorDetail for a start that failed.
export { RpcError } from '../protocol/errors.js';
export { ErrorCode } from '../protocol/codes.js';
export type { StartErrorDetail } from '../protocol/extensions.js';
export { reconnectDelayMs } from './backoff.js';
export type { TrustedCa } from './connection.js';
