/**
 * server/local/: The local back-end: spawn under the keeper, env, native parts, node:fs work.
 * This file is the folder's only door: what other folders use of it, and nothing else.
 */
export { localBackend } from './local-backend.js';
export { adoptChild } from './spawn.js';
