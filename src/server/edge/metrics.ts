/**
 * `GET /metrics`: Prometheus text format, behind the token like the WebSocket. The server's
 * own numbers (sessions, processes, bytes, resumes, evictions, paused time, budget use) are
 * read at scrape time from the monitor and the server's state; the process-level ones
 * (CPU, memory, descriptors, event-loop lag) are prom-client's defaults. prom-client does
 * the format (escaping, HELP/TYPE) so a scraper never chokes on it.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { UpgradeVerdict } from './auth.js';
import { type ProcessCapacity, MEMORY_HOLDERS, type MemoryBudget, HOLD_REASONS, type HoldReason, type OutputShares } from '../memory/index.js';
import type { ServerMonitor, MonitorCounters, Session, RefusalReason } from '../session/index.js';

/** What the metrics read from the server at scrape time. */
export interface MetricsSource {
  monitor: ServerMonitor;
  sessions: ReadonlyMap<string, Session>;
  connections(): number;
  sockets(): number;
  limits: { sessions: number; connections: number; processesPerSession: number; outputRetentionBytes: number };
  /** The server-wide memory budget and process caps. */
  memory?: MemoryBudget;
  capacity?: ProcessCapacity;
  /** Fair shares of the budget's output: sessions paused for being over theirs. */
  shares?: OutputShares;
  /** With a state dir: session records that could not be saved (the record on disk is stale). */
  stateDirSaveFailures?: () => number;
}

/** Labels of the hold reasons (fair-share.ts) in `/metrics`. */
const HOLD_LABEL: Record<HoldReason, string> = { overShare: 'over_fair_share', budgetFull: 'budget_full' };
/** Labels of the refusals (monitor.ts): what was refused, and why. A fixed set: no session ids (unbounded). */
const REFUSAL_LABELS: Record<RefusalReason, { what: string; reason: string }> = {
  sessions: { what: 'session', reason: 'max_sessions' },
  sessionsPerToken: { what: 'session', reason: 'max_sessions_per_token' },
  memoryBudget: { what: 'session', reason: 'memory_budget' },
  processMemoryBudget: { what: 'process', reason: 'memory_budget' },
  processCapacity: { what: 'process', reason: 'capacity' },
};

/** Process-wide metrics (one Node process, whatever number of servers it runs). */
let processRegistry: Registry | undefined;
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

/** A counter whose value is a monotonic total kept elsewhere, read at scrape time. */
function totalCounter(registry: Registry, name: string, help: string, read: () => number): void {
  new Counter({
    name,
    help,
    registers: [registry],
    collect() {
      this.reset();
      this.inc(read());
    },
  });
}

export function createMetricsRegistry(source: MetricsSource): Registry {
  const registry = new Registry();
  const count = (key: keyof MonitorCounters) => () => source.monitor.counters[key];
  // One walk over the sessions and processes per scrape (the collects of one scrape run in
  // the same tick), shared by the metrics that need it.
  const perScrape = <T>(compute: () => T): (() => T) => {
    let value: { v: T } | undefined;
    return () => {
      if (!value) {
        value = { v: compute() };
        setImmediate(() => (value = undefined));
      }
      return value.v;
    };
  };
  const scanned = perScrape(() => scanSessions(source.sessions));
  const total = perScrape(() => source.monitor.totals());

  new Gauge({
    name: 'tether_sessions',
    help: 'Sessions, by whether a connection is attached (detached ones expire after the session TTL)',
    labelNames: ['state'],
    registers: [registry],
    collect() {
      const { attached, detached } = scanned();
      this.set({ state: 'attached' }, attached);
      this.set({ state: 'detached' }, detached);
    },
  });
  totalCounter(registry, 'tether_sessions_created_total', 'Sessions created', count('sessionsCreated'));
  if (source.stateDirSaveFailures) {
    totalCounter(
      registry,
      'tether_state_dir_save_failures_total',
      'Session records that could not be written to the state dir (each also logged): a successor would find them stale',
      source.stateDirSaveFailures,
    );
  }
  totalCounter(registry, 'tether_session_resumes_total', 'Sessions resumed by a returning client', count('sessionResumes'));
  new Counter({
    name: 'tether_sessions_ended_total',
    help: 'Sessions ended: expired (detached past the TTL, or the server stopping) or closed by their client',
    labelNames: ['reason'],
    registers: [registry],
    collect() {
      this.reset();
      this.inc({ reason: 'expired' }, source.monitor.counters.sessionsExpired);
      this.inc({ reason: 'closed' }, source.monitor.counters.sessionsClosed);
    },
  });
  new Gauge({
    name: 'tether_connections',
    help: 'Open WebSocket connections',
    registers: [registry],
    collect() {
      this.set(source.connections());
    },
  });
  new Gauge({
    name: 'tether_processes',
    help: 'Processes held by sessions: running, or exited and still readable',
    labelNames: ['state'],
    registers: [registry],
    collect() {
      const { running, exited } = scanned();
      this.set({ state: 'running' }, running);
      this.set({ state: 'exited' }, exited);
    },
  });
  totalCounter(registry, 'tether_processes_started_total', 'Processes started', count('processesStarted'));
  totalCounter(registry, 'tether_process_start_failures_total', 'process/start requests whose program could not be started', count('processStartFailures'));
  totalCounter(registry, 'tether_processes_ended_total', 'Processes that exited and whose output reached its end', count('processesEnded'));
  totalCounter(registry, 'tether_process_output_bytes_total', "Bytes read from processes' stdout, stderr and terminals", () => total().outputBytes);
  totalCounter(registry, 'tether_process_input_bytes_total', "Bytes written to processes' stdin (a re-sent write counted once)", () => total().inputBytes);
  totalCounter(registry, 'tether_output_evicted_bytes_total', 'Output dropped from retention after a client had it (the oldest first)', () => total().evictedBytes);
  totalCounter(
    registry,
    'tether_output_paused_seconds_total',
    "Time processes' output was not read, summed over processes (a client behind, or retention full of output no client has yet)",
    () => total().pausedMs / 1000,
  );
  new Gauge({
    name: 'tether_output_paused_processes',
    help: 'Processes whose output is not being read right now',
    registers: [registry],
    collect() {
      this.set(total().pausedProcesses);
    },
  });
  new Gauge({
    name: 'tether_output_disk_paused_processes',
    help: 'Processes paused because their output past the window cannot go to disk (reason: output-disk-quota, output-disk-full)',
    labelNames: ['reason'],
    registers: [registry],
    collect() {
      const t = total();
      this.set({ reason: 'output-disk-quota' }, t.pausedDiskQuota);
      this.set({ reason: 'output-disk-full' }, t.pausedDiskFull);
    },
  });
  new Gauge({
    name: 'tether_output_spilled_bytes',
    help: 'Unacknowledged output on disk (the state dir spill), all processes',
    registers: [registry],
    collect() {
      this.set(total().spilledBytes);
    },
  });
  new Gauge({
    name: 'tether_output_retained_bytes',
    help: 'Output kept for replay, all processes',
    registers: [registry],
    collect() {
      this.set(total().retainedBytes);
    },
  });
  new Gauge({
    name: 'tether_budget_limit',
    help: 'Configured limits: sessions and connections per server, processes per session, retained output per process (bytes), the memory budget (bytes), processes and tty processes per server',
    labelNames: ['budget'],
    registers: [registry],
    collect() {
      const l = source.limits;
      this.set({ budget: 'sessions' }, l.sessions);
      this.set({ budget: 'connections' }, l.connections);
      this.set({ budget: 'processes_per_session' }, l.processesPerSession);
      this.set({ budget: 'output_retention_bytes' }, l.outputRetentionBytes);
      if (source.memory) this.set({ budget: 'memory_bytes' }, source.memory.limit);
      if (source.capacity) {
        this.set({ budget: 'processes' }, source.capacity.maxProcesses);
        this.set({ budget: 'ptys' }, source.capacity.maxPtys);
      }
    },
  });
  new Gauge({
    name: 'tether_budget_used',
    help: 'Use of each limit: sessions, open sockets, the busiest session\'s live processes, the fullest process\'s retained output (bytes), memory held (bytes), live processes and tty processes',
    labelNames: ['budget'],
    registers: [registry],
    collect() {
      const s = scanned();
      this.set({ budget: 'sessions' }, source.sessions.size);
      this.set({ budget: 'connections' }, source.sockets());
      this.set({ budget: 'processes_per_session' }, s.maxLiveProcesses);
      this.set({ budget: 'output_retention_bytes' }, s.maxRetained);
      if (source.memory) this.set({ budget: 'memory_bytes' }, source.memory.used);
      if (source.capacity) {
        this.set({ budget: 'processes' }, source.capacity.live);
        this.set({ budget: 'ptys' }, source.capacity.liveTty);
      }
    },
  });
  const memory = source.memory;
  if (memory) {
    new Gauge({
      name: 'tether_memory_held_bytes',
      help: 'Bytes held under the memory budget, by holder (output kept for replay, unacknowledged output, queued input and requests, send buffers, file data, HTTP bodies)',
      labelNames: ['holder'],
      registers: [registry],
      collect() {
        for (const holder of MEMORY_HOLDERS) this.set({ holder }, memory.heldBy(holder));
      },
    });
    new Gauge({
      name: 'tether_memory_pressured',
      help: '1 while the memory budget is past its pause mark (producers are not read)',
      registers: [registry],
      collect() {
        this.set(memory.pressured ? 1 : 0);
      },
    });
  }
  new Counter({
    name: 'tether_refusals_total',
    help: 'New sessions and processes refused, by what and why (max_sessions, max_sessions_per_token, memory_budget, capacity: the process or pty caps)',
    labelNames: ['what', 'reason'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [key, labels] of Object.entries(REFUSAL_LABELS)) this.inc(labels, source.monitor.refusals[key as RefusalReason]);
      if (source.shares) this.inc({ what: 'answer', reason: 'over_fair_share' }, source.shares.refusedAnswers);
    },
  });
  const shares = source.shares;
  if (shares) {
    new Counter({
      name: 'tether_output_session_pauses_total',
      help: "Times a session's output stopped being read because of the memory budget, by reason (over_fair_share: it held its fair share or more while the budget was pressed; budget_full: the budget was spent). session/list names the sessions",
      labelNames: ['reason'],
      registers: [registry],
      collect() {
        this.reset();
        for (const reason of HOLD_REASONS) this.inc({ reason: HOLD_LABEL[reason] }, shares.counters[reason]);
      },
    });
    new Gauge({
      name: 'tether_output_paused_sessions',
      help: "Sessions whose output is not read right now because of the memory budget, by reason (session/list names them)",
      labelNames: ['reason'],
      registers: [registry],
      collect() {
        const now = shares.pausedNow();
        for (const reason of HOLD_REASONS) this.set({ reason: HOLD_LABEL[reason] }, now[reason]);
      },
    });
  }
  return registry;
}

function scanSessions(sessions: ReadonlyMap<string, Session>) {
  let attached = 0;
  let detached = 0;
  let running = 0;
  let exited = 0;
  let maxLiveProcesses = 0;
  let maxRetained = 0;
  for (const session of sessions.values()) {
    if (session.attached) attached++;
    else detached++;
    maxLiveProcesses = Math.max(maxLiveProcesses, session.liveProcessCount);
    for (const proc of session.processes.values()) {
      if (proc.closed) exited++;
      else running++;
      maxRetained = Math.max(maxRetained, proc.retained);
    }
  }
  return { attached, detached, running, exited, maxLiveProcesses, maxRetained };
}

/**
 * Answers `GET /metrics` (and HEAD): 401 without an accepted token, 403 for a browser
 * Origin, like the WebSocket upgrade (`authorize` is `checkUpgrade` with the server's tokens).
 */
export async function serveMetrics(
  req: IncomingMessage,
  res: ServerResponse,
  registry: Registry,
  authorize: (req: IncomingMessage) => UpgradeVerdict,
): Promise<void> {
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    res.writeHead(405, { allow: 'GET, HEAD', 'content-length': '0' });
    res.end();
    return;
  }
  const verdict = authorize(req);
  if (!verdict.ok) {
    const headers: Record<string, string | number> = { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(verdict.body) };
    if (verdict.status === 401) headers['www-authenticate'] = 'Bearer';
    res.writeHead(verdict.status, headers);
    res.end(verdict.body);
    return;
  }
  const merged = Registry.merge([processMetrics(), registry]);
  const body = await merged.metrics();
  res.writeHead(200, { 'content-type': merged.contentType, 'content-length': Buffer.byteLength(body), 'cache-control': 'no-store' });
  res.end(req.method === 'HEAD' ? undefined : body);
}
