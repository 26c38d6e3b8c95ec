/**
 * server/fs/: What every back-end shares of the fs methods: scopes, handles, limits, errors, uris.
 * This file is the folder's only door: what other folders use of it, and nothing else.
 */
export { decodeBase64 } from './base64.js';
export { ByteBudget } from './budget.js';
export { readEnvironmentConfig } from './environment-config.js';
export { errnoError, notAFile } from './errors.js';
export { HandleIds, checkBlockLength, checkHandleId, unknownHandle } from './handle-ids.js';
export { checkKeptFs, decodeWatch, encodeWatch } from './kept-fs.js';
export type { WatchSpec } from './kept-fs.js';
export { FsDefaults, registerFsMethods, sessionShare } from './methods.js';
export type { FsRegistration, FsServerLimits } from './methods.js';
export { joinPath, pathToUri } from './uri.js';
export { checkWalkLimits } from './walk-limits.js';
