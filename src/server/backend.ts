/**
 * Where the server's processes run, behind one interface so another back-end can be plugged
 * in (the server only ever spawns through `ServerState.processes`). The one there is now:
 * `localProcesses`, every command under its own local `tether-keeper` (spawn.ts, keeper.ts).
 * Nothing here loads native code at import; `prepare` does, when a server starts.
 *
 * The filesystem methods (server/fs/) still use node:fs directly: they are not behind this
 * interface yet.
 */
import { prepareKeepers } from './keeper.js';
import { protectServerProcess } from './native.js';
import { spawnChild, type ChildEvents, type ChildSpec, type SpawnedChild } from './spawn.js';

export interface ProcessBackend {
  /** Readies the back-end before the server listens; throws (one line) when it cannot run processes. */
  prepare(): void;
  /**
   * Starts a child (rejects with an RpcError naming what failed, leaving nothing behind); its
   * events reach `events` only after the microtasks that follow the resolution (spawn.ts).
   */
  spawn(spec: ChildSpec, events: ChildEvents): Promise<SpawnedChild>;
}

/** Local processes, each under its own keeper. */
export const localProcesses: ProcessBackend = {
  prepare() {
    // Before anything of a session exists: children must not reach the server's memory or descriptors.
    protectServerProcess();
    prepareKeepers();
  },
  spawn: spawnChild,
};
