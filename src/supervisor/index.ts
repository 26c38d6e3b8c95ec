export { applyJitter, backoffDelay, baseDelay, DEFAULT_BACKOFF, type BackoffPolicy } from '../util/backoff.js';
export * from './crash-window.js';
export * from './errors.js';
export * from './types.js';
export * from './transport/transports.js';
export * from './supervisor.js';
export * from './stderr-summary.js';
