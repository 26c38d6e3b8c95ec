/**
 * What `tether chaos` says as it goes: one line per thing the proxy did (a connection, a
 * cut, a refusal, a change of faults) and a summary at the end, as text or JSON lines.
 */
import type { ChaosProxy, ChaosStats, CloseReason, ConnectionReport, FaultState } from './proxy.js';
import type { PipeCounters } from './pipe.js';
import { formatBytes, formatMs } from '../util/format.js';

export function formatFaults(state: FaultState): string {
  const parts: string[] = [];
  if (state.latencyMs > 0) parts.push(`latency ${formatMs(state.latencyMs)}${state.jitterMs > 0 ? `±${formatMs(state.jitterMs)}` : ''} each way`);
  if (state.bandwidth > 0) parts.push(`bandwidth ${formatBytes(state.bandwidth)}/s each way`);
  if (state.blackhole) parts.push(`black hole (${state.blackhole === 'hold' ? 'holding bytes' : 'dropping bytes'})`);
  if (state.refusing) parts.push('refusing new connections');
  if (state.cutting) {
    const { minMs, maxMs } = state.cutting;
    parts.push(`resets every ${minMs === maxMs ? formatMs(minMs) : `${formatMs(minMs)}..${formatMs(maxMs)}`}`);
  }
  if (state.quota) {
    const direction = state.quota.direction === 'both' ? '' : ` ${state.quota.direction}`;
    parts.push(`reset after ${formatBytes(state.quota.bytes)}${direction}${state.quota.repeat ? '' : ' (once)'}`);
  }
  return parts.length > 0 ? parts.join(', ') : 'none (a clean link)';
}

function traffic(r: { up: PipeCounters; down: PipeCounters }): string {
  const lost = r.up.held + r.down.held;
  const dropped = r.up.dropped + r.down.dropped;
  return (
    `up ${formatBytes(r.up.forwarded)}, down ${formatBytes(r.down.forwarded)}` +
    (lost > 0 ? `, ${formatBytes(lost)} in flight lost` : '') +
    (dropped > 0 ? `, ${formatBytes(dropped)} dropped` : '')
  );
}

const CLOSED_BY: Record<CloseReason, string> = {
  cut: 'reset by a cut',
  quota: 'ended after its byte quota',
  client: 'closed by the client',
  target: 'closed by the target',
  'target-unreachable': 'could not reach the target',
  proxy: 'closed as the proxy stopped',
};

export function formatStats(stats: ChaosStats): string[] {
  return [
    `${formatMs(stats.uptimeMs)}: ${stats.accepted} connections (peak ${stats.peakActive} at once), ${stats.refused} refused, ` +
      `${stats.cuts} reset by cuts, ${stats.quotaCuts} ended after a byte quota, ${stats.targetFailures} could not reach the target`,
    `up (client to target): ${formatBytes(stats.up.forwarded)} forwarded, ${formatBytes(stats.up.dropped)} dropped, ${formatBytes(stats.up.held)} in flight lost`,
    `down (target to client): ${formatBytes(stats.down.forwarded)} forwarded, ${formatBytes(stats.down.dropped)} dropped, ${formatBytes(stats.down.held)} in flight lost`,
  ];
}

export interface ChaosLogOptions {
  json?: boolean;
  /** Only faults changing (what the plan does), not every connection. */
  quiet?: boolean;
  now?: () => number;
}

/**
 * Reports what the proxy does through `write` (one line at a time) until the returned
 * function is called. Fault changes are coalesced: heal() changing six settings is one line.
 */
export function attachLog(proxy: ChaosProxy, write: (line: string) => void, options: ChaosLogOptions = {}): () => void {
  const now = options.now ?? (() => performance.now());
  const start = now();
  const stamp = () => `+${((now() - start) / 1000).toFixed(3)}s`;
  const emit = (event: string, text: string, data: Record<string, unknown>) => {
    if (options.json) write(JSON.stringify({ t: Math.round(now() - start), event, ...data }));
    else write(`${stamp()} ${text}`);
  };
  let lastFaults = '';
  let pending = false;
  const onFault = () => {
    if (pending) return;
    pending = true;
    queueMicrotask(() => {
      pending = false;
      const state = proxy.faults();
      const text = formatFaults(state);
      if (text === lastFaults) return;
      lastFaults = text;
      emit('faults', `faults: ${text}`, { faults: state });
    });
  };
  const onConnection = (r: ConnectionReport) => {
    if (!options.quiet) emit('open', `#${r.id} open from ${r.remote}`, { connection: r });
  };
  const onClose = (r: ConnectionReport, reason: CloseReason, error?: Error) => {
    if (options.quiet || reason === 'cut') return; // a cut is reported as one line for all
    const why = reason === 'target-unreachable' && error ? `${CLOSED_BY[reason]} (${error.message})` : CLOSED_BY[reason];
    emit('close', `#${r.id} ${why} after ${formatMs(r.ageMs)}: ${traffic(r)}`, { connection: r, reason, error: error?.message });
  };
  const onCut = (count: number, reports: ConnectionReport[]) => {
    const text = count === 0 ? 'reset: no live connection to cut' : `reset ${count} connection${count === 1 ? '' : 's'}: ${reports.map((r) => `#${r.id} (${traffic(r)})`).join('; ')}`;
    emit('cut', text, { count, connections: reports });
  };
  const onRefused = (remote: string) => emit('refused', `refused a connection from ${remote}`, { remote });
  proxy.on('fault', onFault);
  proxy.on('connection', onConnection);
  proxy.on('close', onClose);
  proxy.on('cut', onCut);
  proxy.on('refused', onRefused);
  onFault();
  return () => {
    proxy.off('fault', onFault);
    proxy.off('connection', onConnection);
    proxy.off('close', onClose);
    proxy.off('cut', onCut);
    proxy.off('refused', onRefused);
  };
}
