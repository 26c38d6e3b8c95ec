/**
 * server/methods/: The exec-server method handlers, each group with the narrow state it needs.
 * This file is the folder's only door: what other folders use of it, and nothing else.
 */
export { createRpcServer } from './methods.js';
export type { MethodsState } from './methods.js';
