/**
 * The server's own native needs (native/addon.c, built at install with the keeper).
 */
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { assertKeeperBuilt } from './keeper.js';

interface NativeAddon {
  setDumpable(flag: boolean): void;
  isDumpable(): boolean;
}

const ADDON_PATH = fileURLToPath(new URL('../../native/build/Release/tether_native.node', import.meta.url));

let addon: NativeAddon | undefined;

function load(): NativeAddon {
  if (!addon) {
    try {
      addon = createRequire(import.meta.url)(ADDON_PATH) as NativeAddon;
    } catch (err) {
      throw new Error(
        `tether's native addon is not built or does not load (${ADDON_PATH}: ${(err as Error).message}): ` +
          'it is compiled at install; run `npm rebuild` in the package (needs a C compiler, make and python3)',
      );
    }
  }
  return addon;
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
  load().setDumpable(false);
}

/** Whether this process may be dumped or inspected by same-user processes (for tests). */
export function isDumpable(): boolean {
  return load().isDumpable();
}
