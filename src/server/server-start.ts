/**
 * How `tether serve` starts (server.ts is the running server): the options checked, an
 * unsafe configuration refused before anything listens (no token off loopback, decided on
 * the address a name resolves to and on the address bound), the state dir opened (restart
 * adoption), the HTTP(S) server bound (or given a descriptor, `--replace`), then the TetherServer.
 */
import { createServer, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { lookup as dnsLookup } from 'node:dns/promises';
import { isIP, type AddressInfo } from 'node:net';
import { isLoopbackName } from '../util/loopback.js';
import { stderrLogger } from '../util/logger.js';
import { invalidDuration } from '../util/timeouts.js';
import type { ServerBackend } from './backend/index.js';
import { KeptServer, answerWhileStarting, defaultDiskTotal } from './restart/index.js';
import { statfsSync } from 'node:fs';
import { dirname } from 'node:path';
import { localBackend } from './local/index.js';
import { Defaults, outputLimits, type TetherServerOptions } from './options.js';
import { TetherServer } from './server.js';

/** `startServer` refused an unsafe configuration (before listening). */
export class InsecureConfigError extends Error {
  override readonly name = 'InsecureConfigError';
}

/** RangeError for a `…Ms` option that is no duration (startServer, startStdioServer). @internal */
export function checkDurations(opts: TetherServerOptions, caller: string): void {
  for (const [key, value] of Object.entries(opts)) {
    const invalid = key.endsWith('Ms') && value !== undefined ? invalidDuration(value) : null;
    if (invalid) throw new RangeError(`${caller}: ${key} ${invalid} (got ${String(value)})`);
  }
}

export function startServer(opts: TetherServerOptions = {}): Promise<TetherServer> {
  return startServerWith(opts, localBackend);
}

/** `startServer` with another back-end (backend.ts; the relay's remote one). Not public: src/relay uses it. */
export async function startServerWith(opts: TetherServerOptions, backend: ServerBackend): Promise<TetherServer> {
  // Before anything of a session exists (local: the server made non-dumpable, keepers checked).
  backend.prepare();
  checkDurations(opts, 'startServer');
  const host = opts.host ?? Defaults.host;
  const guarded = opts.token !== undefined || opts.insecureNoToken === true;
  const refuse = (where: string) =>
    new InsecureConfigError(
      `refusing to listen on ${where} without a token: anyone who reaches this port could run commands as this user ` +
        `(give a token with --token-file or TETHER_TOKEN, or accept the risk with --insecure-no-token)`,
    );
  if (!guarded && !isLoopbackName(host)) throw refuse(host);
  // A loopback *name* is only a claim (a resolver, /etc/hosts, can point it anywhere): decide
  // on the address it resolves to, and bind that very address, before anything listens.
  let bindAddress = host;
  if (!guarded && isIP(host.replace(/^\[(.*)\]$/, '$1')) === 0) {
    const resolved = await (opts.lookup ?? dnsLookup)(host);
    if (!isLoopbackName(resolved.address)) throw refuse(`${host} (it resolves to ${resolved.address}, not a loopback address)`);
    bindAddress = resolved.address;
  }
  // A state dir (restart adoption): opened and locked (a refusal stops the start) before anything
  // listens; what a predecessor left is adopted only once the port is bound, so a server that
  // cannot bind has touched no keeper (they go on waiting for the next one).
  const kept = opts.stateDir
    ? await KeptServer.open({
        stateDir: opts.stateDir,
        adoptWithinMs: opts.adoptWithinMs ?? Defaults.adoptWithinMs,
        log: opts.logger ?? stderrLogger('warn'),
        output: outputLimits(opts),
        ...outputDisk(opts),
        ...(opts.listenFd === undefined ? { port: opts.port ?? Defaults.port } : {}),
      })
    : null;
  const initializeTimeoutMs = opts.initializeTimeoutMs ?? Defaults.initializeTimeoutMs;
  const checkEvery = Math.max(50, Math.min(1000, Math.floor(initializeTimeoutMs / 4)));
  const http: HttpServer = opts.tls
    ? // A TLS handshake that never finishes is an idle socket too.
      createHttpsServer({ ...opts.tls, handshakeTimeout: initializeTimeoutMs, connectionsCheckingInterval: checkEvery })
    : createServer({ connectionsCheckingInterval: checkEvery });
  // A listening socket handed over (--replace) is bound already, and what connects meanwhile
  // waits in its backlog: it is adopted into before it is listened on, as no answer is due.
  const adoptFirst = kept !== null && opts.listenFd !== undefined;
  try {
    if (adoptFirst) await kept.adoptAll();
    await new Promise<void>((resolve, reject) => {
      http.once('error', reject);
      const listening = () => {
        http.off('error', reject);
        resolve();
      };
      if (opts.listenFd !== undefined) http.listen({ fd: opts.listenFd }, listening);
      else http.listen(opts.port ?? Defaults.port, bindAddress, listening);
    });
  } catch (err) {
    kept?.handBack();
    throw bindError(err as NodeJS.ErrnoException, kept && !adoptFirst ? kept : null);
  }
  try {
    // And once more on what was actually bound.
    const bound = (http.address() as AddressInfo | null)?.address ?? '';
    if (!guarded && !isLoopbackName(bound)) throw refuse(`${host} (bound to ${bound}, not a loopback address)`);
    if (kept && !adoptFirst) {
      // Listening already: every request is told what the start waits for (starting-gate.ts).
      const detach = answerWhileStarting(http, () => kept.waitingFor ?? 'starting');
      try {
        await kept.adoptAll();
      } finally {
        detach();
      }
    }
    const server = TetherServer.create(http, opts, host, backend);
    if (kept) server.useStateDir(kept);
    return server;
  } catch (err) {
    // Whatever was adopted is handed back alive, the lock released: a later server adopts it.
    kept?.handBack();
    await new Promise<void>((resolve) => http.close(() => resolve()));
    throw err;
  }
}

/**
 * A TetherServer that listens on no port, for `serveStdio` (edge/stdio-listener.ts: its `url`
 * means nothing; its `close()` kills what is left). `backend`: where the work is done
 * (backend.ts), as for `startServerWith`: the local one, or the relay's remote one.
 */
export function startStdioServer(opts: TetherServerOptions = {}, backend: ServerBackend = localBackend): TetherServer {
  backend.prepare();
  checkDurations(opts, 'startStdioServer');
  return TetherServer.create(createServer(), opts, 'stdio', backend);
}

/**
 * A failed bind, in one line saying what conflicts and what to do; with a state dir, that it
 * was released with nothing adopted (its processes wait for the next server, as before).
 */
function bindError(err: NodeJS.ErrnoException, kept: KeptServer | null): Error {
  const hint =
    err.code === 'EADDRINUSE'
      ? ': another server listens there (a tether server on the same state dir is taken over with --replace; else stop it or choose another --port)'
      : '';
  const dir = kept ? `; state dir ${kept.dir.path} released, nothing adopted (its processes wait --adopt-within for the next server)` : '';
  return Object.assign(new Error(`${err.message}${hint}${dir}`), { code: err.code });
}

/**
 * The disk the output spill may use (output beyond the window goes to disk): --output-disk per
 * session (1 GiB; 0: no spill), within --output-disk-total, by default a quarter of the state
 * dir filesystem's free space now, at most 16 GiB (restart/disk-quota.ts `defaultDiskTotal`).
 */
function outputDisk(opts: TetherServerOptions): { disk?: { totalBytes: number; sessionBytes: number } } {
  const sessionBytes = opts.outputDiskBytes ?? Defaults.outputDiskBytes;
  if (sessionBytes <= 0 || !opts.stateDir) return {};
  let totalBytes = opts.outputDiskTotalBytes;
  if (totalBytes === undefined) {
    let free = 0;
    try {
      const fs = statfsSync(opts.stateDir);
      free = fs.bavail * fs.bsize;
    } catch {
      // not there yet (the state dir is created on open): its parent's filesystem
      try {
        const fs = statfsSync(dirname(opts.stateDir));
        free = fs.bavail * fs.bsize;
      } catch {
        free = 0;
      }
    }
    totalBytes = defaultDiskTotal(free);
  }
  return totalBytes > 0 ? { disk: { totalBytes, sessionBytes } } : {};
}
