/**
 * server/connection/: One client connection: send buffer, receive meter, request gate, liveness, frames.
 * This file is the folder's only door: what other folders use of it, and nothing else.
 */
export { Connection } from './connection.js';
export type { ConnectionContext } from './connection.js';
export { frameCost } from './frame-cost.js';
export type { BackpressureMarks } from './send-buffer.js';
