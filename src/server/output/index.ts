/**
 * server/output/: The numbered output of one process: its log, reads, flow, stdin and exit.
 * This file is the folder's only door: what other folders use of it, and nothing else.
 */
export type { RestoreState } from './log/log-restore.js';
export { OutputLog, outputParts } from './log/output-log.js';
export type { LogEntry, OutputEntry, OutputGap } from './log/output-log.js';
export { keeperObserver, logOptions } from './process-log.js';
export type { OutputLimits, SpawnSpec } from './process-spec.js';
export { ManagedProcess } from './process.js';
export type { ProcessHost } from './process.js';
export type { OutputSpill, SpillRefusal } from './log/output-spill.js';
export type { PauseReason } from './output-flow.js';
