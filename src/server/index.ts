/**
 * `tether-exec/server`: start a tether exec-server in-process (docs/library.md). Only what is
 * re-exported here is public; every other module under server/ is internal.
 */
export { TetherServer, type TetherServerEvents, type ConnectionInfo } from './server.js';
export { startServer, InsecureConfigError } from './server-start.js';
export { Defaults, type TetherServerOptions } from './options.js';
export type { LogLevel } from '../util/logger.js';
/** @internal The relay's doors (src/relay): a server with another back-end, on a port or on stdio. */
export { startServerWith, startStdioServer } from './server-start.js';
/** @internal */
export { serveStdio } from './edge/index.js';
