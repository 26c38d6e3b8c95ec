/**
 * What `startServer` takes (`TetherServerOptions`) and the defaults of what it leaves out
 * (`Defaults`, re-exported by the library as `ServerDefaults`).
 */
import type { BackpressureMarks } from './connection/index.js';
import type { FsServerLimits } from './fs/index.js';
import type { OutputLimits } from './output/index.js';
import type { Logger } from '../util/logger.js';

export interface TetherServerOptions {
  /** Interface to bind; 127.0.0.1 by default (loopback only). */
  host?: string;
  /** 8765 by default; 0 picks any free port. */
  port?: number;
  /**
   * A TCP socket descriptor already listening, to serve on instead of binding `host`:`port`
   * (`tether serve --replace` receives its predecessor's: src/server/restart/handover.ts). `host` still
   * decides the token and Host checks; the address bound is checked as for any listen.
   */
  listenFd?: number;
  /** How long a detached session lives (30 s). */
  sessionTtlMs?: number;
  /**
   * The longest a client may ask its session to outlive a drop (extension `sessionKeep`, 24 h;
   * at least `sessionTtlMs`, at most 2^31-1 ms). Clients that ask nothing get `sessionTtlMs`.
   */
  maxSessionTtlMs?: number;
  /**
   * Codex dialect (no `acks`): after a resume, how long the output recorded while detached
   * waits for the client to read it back with `process/read` (2 s); live output of that
   * process waits behind it. A client that does not read it gets it as notifications then.
   */
  resumeGraceMs?: number;
  /**
   * Output per process not acknowledged by the client (sent and unsent) at which the server
   * stops reading the child, so it blocks on write (8 MiB): what memory a process can take,
   * and, with `acks`, what can be in flight (throughput per process is at most window / RTT).
   */
  outputWindowBytes?: number;
  /** Acknowledged output kept per process for `process/read` (1 MiB). */
  outputRetentionBytes?: number;
  /**
   * With a state dir: output past the window is written to disk (DIR/spill/) instead of
   * pausing the child, at most this much per session (1 GiB; 0: never, the child pauses at the
   * window as without a state dir).
   */
  outputDiskBytes?: number;
  /**
   * With a state dir: what all spills together may use, shared per token (default: a quarter
   * of the state dir filesystem's free space at start, at most 16 GiB).
   */
  outputDiskTotalBytes?: number;
  /** How long a closed process stays readable (30 s). */
  closedRetentionMs?: number;
  /** Bearer token required on the upgrade request; off when undefined. */
  token?: string;
  /**
   * Serve `wss://` (TLS) with this certificate chain and private key (PEM). Without it the
   * server speaks plain `ws://`, fit for loopback or behind a TLS proxy.
   */
  tls?: { cert: string | Buffer; key: string | Buffer };
  /** More tokens accepted besides `token`, each its own identity (sessions belong to the token that created them). */
  tokens?: string[];
  /**
   * A token that may also list every session (`session/list`, `tether ps`); it is accepted
   * like any token. Without it each client lists only the sessions of its own token.
   */
  adminToken?: string;
  /** Audit lines carry the whole argv (by default only argv[0]: arguments can hold secrets). */
  auditArgv?: boolean;
  /** `Origin` values allowed to connect (any other Origin gets 403). */
  allowedOrigins?: string[];
  /**
   * On a loopback listener, `Host` names accepted besides loopback ones (localhost,
   * *.localhost, 127.0.0.0/8, ::1); any other Host gets 403 (DNS rebinding). The port in
   * the header is never compared (ssh -L forwards from another port).
   */
  allowedHosts?: string[];
  /**
   * Listening on a non-loopback address without a token is refused at start (anyone who
   * reaches the port could run commands); true overrides that (`--insecure-no-token`).
   */
  insecureNoToken?: boolean;
  /**
   * Resolves `host` when it is a name (default: the system resolver, as `listen` would). A
   * loopback name (localhost, *.localhost) is trusted only once it resolves to a loopback
   * address, and the server binds that very address. Injectable for tests.
   */
  lookup?: (hostname: string) => Promise<{ address: string; family: number }>;
  /** Largest incoming WebSocket message (16 MiB); bigger ones close the connection with 1009. */
  maxMessageBytes?: number;
  /**
   * Requests in flight per connection (4096): each waiting one (a long-poll) holds memory,
   * so past this a new request is answered -32600 at once.
   */
  maxInflightRequests?: number;
  /** Live processes per session (1024). */
  maxProcessesPerSession?: number;
  /**
   * Bytes of everything clients and children can make the server hold (output not yet
   * acknowledged or kept for replay, queued input, send buffers, file data): from 90 % of it
   * the sessions over their fair share pause, and at 100 % they are refused new processes
   * (fair-share.ts). Default: a quarter
   * of the memory limit (RAM, or the cgroup's if lower), at most 1 GiB.
   */
  memoryBudgetBytes?: number;
  /**
   * Processes (and their keepers) on the whole server at once. Default: derived from the
   * descriptor limit (what connections, files and the server keep aside, at 4 per process)
   * and the machine's process ids.
   */
  maxServerProcesses?: number;
  /** tty processes on the whole server at once. Default: kernel.pty.max less kernel.pty.reserve, at most the process cap. */
  maxPtys?: number;
  /** Sessions per server, attached or detached (10000). */
  maxSessions?: number;
  /**
   * Sessions one token may have at once, attached or detached (256; with auth off every
   * client counts as one token). The memory budget's output is shared fairly between tokens,
   * then between each token's sessions (server/fair-share.ts): this bounds the sessions a
   * token can split its share into.
   */
  maxSessionsPerToken?: number;
  /** Server → client ping interval (30 s); a connection that misses two pongs in a row is dropped. */
  pingIntervalMs?: number;
  /**
   * A connection whose send buffer holds bytes and has not moved for this long (30 s) is
   * dropped and its session detaches: a client that stops reading cannot pin its session,
   * and its paused children, forever.
   */
  stallTimeoutMs?: number;
  /**
   * A connection must complete `initialize` this soon after its upgrade, and a socket must
   * send its HTTP request headers this soon after it opens (5 s); otherwise it is closed.
   */
  initializeTimeoutMs?: number;
  /**
   * Open sockets (WebSocket and plain HTTP) at most; one more is answered HTTP 503 with the
   * reason. Default: a quarter of the descriptor limit (RLIMIT_NOFILE), at most 10,000, so
   * the server refuses clearly long before accept() would fail with EMFILE.
   */
  maxConnections?: number;
  /**
   * When a client tries to resume a session that is still attached (-32010), the attached
   * connection is pinged and dropped unless it answers within this time (2 s), so a socket
   * that died silently does not hold its session for a whole heartbeat period.
   */
  livenessProbeMs?: number;
  /** Send-buffer marks: events wait in the output logs above the high mark until the buffer drains to the low one (1 MiB / 256 KiB). */
  backpressure?: Partial<BackpressureMarks>;
  /**
   * Where the server keeps what a successor server needs to adopt its sessions (restart adoption):
   * its keepers' sockets, session records and idempotency-key journals (state-dir.ts). With
   * one, a server that stops or dies leaves its processes running for `adoptWithinMs`, and a
   * new server on the same state dir adopts them. Without one (undefined or null, the
   * library's default) processes die with the server. `tether serve` defaults to a per-user
   * directory (`$XDG_STATE_HOME/tether`, `~/.local/state/tether`, …).
   */
  stateDir?: string | null;
  /**
   * With a state dir: how long each keeper keeps its process after its server stopped or died,
   * waiting for a successor to adopt it, before it kills the process's tree (60 s).
   */
  adoptWithinMs?: number;
  /** Limits of the filesystem methods: readFile size, handles, memory (see `FsDefaults`). */
  fs?: Partial<FsServerLimits>;
  logger?: Logger;
}

export const Defaults = {
  host: '127.0.0.1',
  port: 8765,
  sessionTtlMs: 30_000,
  maxSessionTtlMs: 24 * 3_600_000,
  resumeGraceMs: 2_000,
  outputWindowBytes: 8 * 1024 * 1024,
  outputRetentionBytes: 1024 * 1024,
  /** Output spilled to disk per session (with a state dir). */
  outputDiskBytes: 1024 * 1024 * 1024,
  /** Output read ahead of an attached connection's send buffer, and the largest joined chunk. */
  readAheadBytes: 1024 * 1024,
  maxChunkBytes: 1024 * 1024,
  /** Largest process/read answer (decoded bytes). */
  readCapBytes: 8 * 1024 * 1024,
  closedRetentionMs: 30_000,
  maxMessageBytes: 16 * 1024 * 1024,
  maxProcessesPerSession: 1024,
  maxInflightRequests: 4096,
  maxSessions: 10_000,
  maxSessionsPerToken: 256,
  pingIntervalMs: 30_000,
  stallTimeoutMs: 30_000,
  initializeTimeoutMs: 5_000,
  livenessProbeMs: 2_000,
  adoptWithinMs: 60_000,
  highWaterBytes: 1024 * 1024,
  lowWaterBytes: 256 * 1024,
} as const;

/** The per-process output limits `opts` asks for, defaults filled in. */
export function outputLimits(opts: TetherServerOptions): OutputLimits {
  const windowBytes = opts.outputWindowBytes ?? Defaults.outputWindowBytes;
  return {
    windowBytes,
    retentionBytes: opts.outputRetentionBytes ?? Defaults.outputRetentionBytes,
    readAheadBytes: Math.min(Defaults.readAheadBytes, windowBytes),
    // A quarter window at most: a chunk is acknowledged whole, so several must fit in the
    // window for the child to be read while the client acknowledges (window/4: how acks batch).
    maxChunkBytes: Math.max(1, Math.min(Defaults.maxChunkBytes, Math.floor(windowBytes / 4))),
    readCapBytes: Defaults.readCapBytes,
  };
}
