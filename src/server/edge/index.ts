/**
 * server/edge/: Where clients come in: the HTTP gate, auth, /metrics, /readyz, the stdio listener.
 * This file is the folder's only door: what other folders use of it, and nothing else.
 */
export { digest } from './auth.js';
export { HttpGate } from './http-gate.js';
export { createMetricsRegistry } from './metrics.js';
export { serveStdio } from './stdio-listener.js';
