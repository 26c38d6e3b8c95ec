/**
 * server/session/: Sessions, their handles, closed-process retention and what operators see of them.
 * This file is the folder's only door: what other folders use of it, and nothing else.
 */
export { listedArgv } from './listed-argv.js';
export { ServerMonitor, logfmtValue } from './monitor.js';
export type { MonitorCounters, RefusalReason } from './monitor.js';
export { Session } from './session.js';
export { grantKeep, keepLimits, MAX_KEEP_MS, type KeepLimits } from './session-keep.js';
export type { DeliveredMap, SessionLimits, SessionLink, WatcherLink } from './session.js';
