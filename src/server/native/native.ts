/**
 * The native part: the keeper every command runs under (native/keeper.c) and the addon the
 * server loads itself (native/addon.c). Which build is used, in order:
 *
 *   1. a source build, native/build/Release/ (`npm run build:native`, or a clone's install);
 *   2. the package's prebuild for this platform, architecture and C library:
 *      prebuilds/<platform>-<arch>/tether-keeper and tether_native.<glibc|musl>.node;
 *   3. none: the client commands and the library's clients work; the server refuses to start,
 *      in one line naming the command that builds it from source.
 *
 * Nothing here looks at import (the library's root export imports this module; a client that
 * starts no server never looks).
 */
import { accessSync, constants as fsConstants, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The package's root: the nearest folder above this module with a package.json (this file
 * runs from src/server/native, dist/server/native or the bundle in dist/bundle).
 */
const PACKAGE_DIR = packageDir(path.dirname(fileURLToPath(import.meta.url)));

function packageDir(from: string): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    if (existsSync(path.join(dir, 'package.json'))) return dir;
    if (path.dirname(dir) === dir) return path.join(from, '..', '..', '..');
  }
}
const SOURCE_BUILD = path.join(PACKAGE_DIR, 'native', 'build', 'Release');

export interface NativeBuild {
  /** What `tether --version` says: "source build" or "prebuild linux-x64 glibc". */
  label: string;
  /** The keeper executable. */
  keeper: string;
  /** The addon (.node). */
  addon: string;
}

/** The one command that builds the native part from source, for this package. */
export const BUILD_FROM_SOURCE = `cd ${PACKAGE_DIR} && npm run build:native`;
const BUILD_HINT = `build it from source: \`${BUILD_FROM_SOURCE}\` (needs a C compiler, make and python3)`;

/** The C library this Node runs on (Linux), from its own report; undefined elsewhere. */
export function libcFamily(): 'glibc' | 'musl' | undefined {
  if (process.platform !== 'linux') return undefined;
  // excludeNetwork: Node 20.13+ (and 22), missing from @types/node 20's ProcessReport.
  const report = process.report as NodeJS.ProcessReport & { excludeNetwork?: boolean };
  const excluded = report.excludeNetwork;
  report.excludeNetwork = true; // no reverse DNS look-ups of open sockets
  try {
    const header = (report.getReport() as { header?: { glibcVersionRuntime?: string } }).header;
    return header?.glibcVersionRuntime ? 'glibc' : 'musl';
  } finally {
    report.excludeNetwork = excluded;
  }
}

/** The prebuild directory's name for this process: e.g. "linux-x64". */
export function prebuildTarget(): string {
  return `${process.platform}-${process.arch}`;
}

let chosen: NativeBuild | null | undefined;

/** The native build this process uses (source build first, then a prebuild), or null when none fits. */
export function nativeBuild(): NativeBuild | null {
  if (chosen !== undefined) return chosen;
  const source: NativeBuild = { label: 'source build', keeper: path.join(SOURCE_BUILD, 'tether-keeper'), addon: path.join(SOURCE_BUILD, 'tether_native.node') };
  if (existsSync(source.keeper) && existsSync(source.addon)) return (chosen = source);
  const target = prebuildTarget();
  const libc = libcFamily();
  if (libc) {
    const dir = path.join(PACKAGE_DIR, 'prebuilds', target);
    const prebuild: NativeBuild = { label: `prebuild ${target} ${libc}`, keeper: path.join(dir, 'tether-keeper'), addon: path.join(dir, `tether_native.${libc}.node`) };
    if (existsSync(prebuild.keeper) && existsSync(prebuild.addon)) return (chosen = prebuild);
  }
  return (chosen = null);
}

/** Why there is no native build here, with the command that makes one. */
function noBuild(): string {
  const libc = libcFamily();
  return `tether's native part is not built from source and has no prebuild for ${prebuildTarget()}${libc ? ` (${libc})` : ''}: ${BUILD_HINT}`;
}

/** For `tether --version`: the build picked, or what the server would need. */
export function nativeSummary(): string {
  const build = nativeBuild();
  return build ? build.label : `none — client commands only; serve needs: ${BUILD_FROM_SOURCE}`;
}

/** The keeper executable to run (throws the one-line error when there is none). */
export function keeperPath(): string {
  const build = nativeBuild();
  if (!build) throw new Error(noBuild());
  return build.keeper;
}

export interface NativeAddon {
  setDumpable(flag: boolean): void;
  isDumpable(): boolean;
  /** socketpair(AF_UNIX), both ends close-on-exec, the first one non-blocking. */
  socketPair(seqpacket: boolean): [number, number];
  /** Sends one one-byte record carrying `fds` (SCM_RIGHTS). */
  sendFds(fd: number, fds: number[]): void;
  closeFd(fd: number): void;
  /**
   * Connects a Unix stream socket to `path` and receives one byte carrying up to 8 descriptors
   * (SCM_RIGHTS), waiting at most `timeoutMs`. Returns the connected socket (still open: a
   * kept keeper's control socket) and the descriptors, all close-on-exec and non-blocking.
   * Throws an Error with errno, code (e.g. ENOENT, ECONNREFUSED, EACCES, EAGAIN on timeout,
   * ECONNRESET when closed without a word) and syscall.
   */
  connectReceiveFds(path: string, timeoutMs: number): { socket: number; fds: number[] };
}

let addon: NativeAddon | undefined;

export function nativeAddon(): NativeAddon {
  if (!addon) {
    const build = nativeBuild();
    if (!build) throw new Error(noBuild());
    try {
      addon = createRequire(import.meta.url)(build.addon) as NativeAddon;
    } catch (err) {
      throw new Error(`tether's native addon (${build.label}) does not load (${build.addon}: ${(err as Error).message}): ${BUILD_HINT}`);
    }
  }
  return addon;
}

/** Throws a clear error when there is no runnable keeper (instead of failing every process/start). */
export function assertKeeperBuilt(): void {
  const keeper = keeperPath();
  try {
    accessSync(keeper, fsConstants.X_OK);
  } catch {
    throw new Error(`tether's native keeper is missing or not executable (${keeper}): ${BUILD_HINT}`);
  }
}

/**
 * Makes the server process non-dumpable (PR_SET_DUMPABLE 0), as ssh-agent does: processes of
 * the same OS user — every session's children — can then neither open /proc/<server>/fd/N
 * (other sessions' pipes), /proc/<server>/environ (the token) or /proc/<server>/mem (every
 * session id, i.e. every resume credential), nor ptrace it. Also checks that the keeper is
 * there, so a package without a native build fails at start rather than at the first
 * process/start.
 */
export function protectServerProcess(): void {
  assertKeeperBuilt();
  nativeAddon().setDumpable(false);
}

/** Whether this process may be dumped or inspected by same-user processes (for tests). */
export function isDumpable(): boolean {
  return nativeAddon().isDumpable();
}
