/**
 * The local back-end (backend.ts): what `tether serve` does. Every command under its own
 * local `tether-keeper` (spawn.ts, keeper.ts), files with node:fs (fs/local-work.ts), HTTP
 * with node:http (http-send.ts), and this machine's description. It holds nothing per
 * session: one `SessionBackend` serves them all. Native code is loaded by `prepare` (when a
 * server starts) and by the first spawn, never at import.
 */
import type { ServerBackend, SessionBackend } from '../backend/index.js';
import { buildChildEnv } from './env.js';
import { environmentInfo } from './environment-info.js';
import { readEnvironmentConfig } from '../fs/index.js';
import { localFs } from './fs/local-work.js';
import { sendLocal } from './http-send.js';
import { prepareKeepers } from './keeper/keeper.js';
import { protectServerProcess } from '../native/index.js';
import { spawnChild } from './spawn.js';

const localSession: SessionBackend = {
  // The client's env and policy become the child's environment here, from this server's own.
  spawn: (spec, events) => spawnChild({ ...spec, env: buildChildEnv(spec.env, spec.envPolicy) }, events),
  fs: localFs,
  httpRequest: sendLocal,
  environmentInfo,
  environmentConfig: (configPaths, requirementsPaths) => readEnvironmentConfig(configPaths, requirementsPaths),
  close() {},
};

export const localBackend: ServerBackend = {
  prepare() {
    // Before anything of a session exists: children must not reach the server's memory or descriptors.
    protectServerProcess();
    prepareKeepers();
  },
  extensions: null,
  openSession: () => localSession,
};
