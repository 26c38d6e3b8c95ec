/**
 * The native part (native/, built at install by node-gyp): where its files are, and the
 * addon the server loads itself (native/addon.c).
 */
import { accessSync, constants as fsConstants } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const BUILD = new URL('../../native/build/Release/', import.meta.url);
/** The keeper every command runs under (native/keeper.c). */
export const KEEPER_PATH = fileURLToPath(new URL('tether-keeper', BUILD));
const ADDON_PATH = fileURLToPath(new URL('tether_native.node', BUILD));

export interface NativeAddon {
  setDumpable(flag: boolean): void;
  isDumpable(): boolean;
  /** socketpair(AF_UNIX), both ends close-on-exec, the first one non-blocking. */
  socketPair(seqpacket: boolean): [number, number];
  /** Sends one one-byte record carrying `fds` (SCM_RIGHTS). */
  sendFds(fd: number, fds: number[]): void;
  closeFd(fd: number): void;
}

let addon: NativeAddon | undefined;

const REBUILD_HINT = 'it is compiled at install; run `npm rebuild` in the package (needs a C compiler, make and python3, as node-gyp does)';

export function nativeAddon(): NativeAddon {
  if (!addon) {
    try {
      addon = createRequire(import.meta.url)(ADDON_PATH) as NativeAddon;
    } catch (err) {
      throw new Error(`tether's native addon is not built or does not load (${ADDON_PATH}: ${(err as Error).message}): ${REBUILD_HINT}`);
    }
  }
  return addon;
}

/** Throws a clear error when the keeper was not built (instead of failing every process/start). */
export function assertKeeperBuilt(): void {
  try {
    accessSync(KEEPER_PATH, fsConstants.X_OK);
  } catch {
    throw new Error(`tether's native keeper is not built (${KEEPER_PATH} is missing): ${REBUILD_HINT}`);
  }
}

/**
 * Makes the server process non-dumpable (PR_SET_DUMPABLE 0), as ssh-agent does: processes of
 * the same OS user — every session's children — can then neither open /proc/<server>/fd/N
 * (other sessions' pipes), /proc/<server>/environ (the token) or /proc/<server>/mem (every
 * session id, i.e. every resume credential), nor ptrace it. Also checks that the keeper is
 * built, so a broken install fails at start rather than at the first process/start.
 */
export function protectServerProcess(): void {
  assertKeeperBuilt();
  nativeAddon().setDumpable(false);
}

/** Whether this process may be dumped or inspected by same-user processes (for tests). */
export function isDumpable(): boolean {
  return nativeAddon().isDumpable();
}
