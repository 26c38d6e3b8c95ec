// The formula lives in util/backoff.ts (one module for every retry delay).
export { reconnectDelayMs } from '../util/backoff.js';
