export * from './backoff.js';
export * from './crash-window.js';
export * from './errors.js';
export * from './types.js';
export * from './transports.js';
export * from './supervisor.js';
export * from './stderr-summary.js';
