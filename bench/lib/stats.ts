/** Small helpers for turning samples into the numbers the bench tables print. */

export interface Summary {
  n: number;
  p50: number;
  p99: number;
  min: number;
  max: number;
  mean: number;
}

/** Nearest-rank percentile of an ascending-sorted array (p in [0, 100]). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export function summarize(samples: readonly number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  const sum = sorted.reduce((total, value) => total + value, 0);
  return {
    n: sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    min: sorted[0] ?? Number.NaN,
    max: sorted[sorted.length - 1] ?? Number.NaN,
    mean: sorted.length > 0 ? sum / sorted.length : Number.NaN,
  };
}

/** Milliseconds with a precision that suits their size. */
export function ms(value: number): string {
  if (!Number.isFinite(value)) return 'n/a';
  if (value < 1) return `${value.toFixed(3)} ms`;
  if (value < 100) return `${value.toFixed(2)} ms`;
  return `${value.toFixed(0)} ms`;
}

export function mib(bytes: number): string {
  if (!Number.isFinite(bytes)) return 'n/a';
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** How many times better `a` is than `b` when lower is better (latency). */
export function ratioLowerBetter(a: number, b: number): string {
  if (!Number.isFinite(a) || !Number.isFinite(b) || a <= 0) return 'n/a';
  return `${(b / a).toFixed(1)}x`;
}

/** How many times better `a` is than `b` when higher is better (throughput). */
export function ratioHigherBetter(a: number, b: number): string {
  if (!Number.isFinite(a) || !Number.isFinite(b) || b <= 0) return 'n/a';
  return `${(a / b).toFixed(2)}x`;
}

/** A plain fixed-width table (first row is the header) for stdout. */
export function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => (row[column] ?? '').length)));
  const line = (row: string[]): string => row.map((cell, column) => cell.padEnd(widths[column]!)).join('  ').trimEnd();
  return [line(rows[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.slice(1).map(line)].join('\n');
}

export function verdict(ok: boolean): string {
  return ok ? 'met' : 'MISSED';
}
