// The formula lives in util/backoff.ts (one module for every retry delay, issue #24).
export { reconnectDelayMs } from '../util/backoff.js';
