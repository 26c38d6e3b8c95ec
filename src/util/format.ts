/** Human-readable sizes, durations and names for logs, tables and messages. */

/**
 * A byte count in binary units. 'short' (logs, tables): 512B, 1.5KiB, 12MiB, one decimal
 * below 10, up to TiB. 'long' (a sentence, like tether cp's summary): 512 bytes, 1.5 KiB,
 * 12.0 MiB, always one decimal, up to GiB.
 */
export function formatBytes(n: number, style: 'short' | 'long' = 'short'): string {
  const long = style === 'long';
  if (n < 1024) return long ? `${n} bytes` : `${n}B`;
  const units = long ? ['KiB', 'MiB', 'GiB'] : ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  if (long) return `${value.toFixed(1)} ${units[unit]}`;
  return `${value < 10 ? value.toFixed(1) : Math.round(value)}${units[unit]}`;
}

/**
 * 16 MiB, 512 KiB, 1000 bytes: a configured limit as written, in the largest binary unit it
 * is a whole multiple of (for limits quoted in messages; no rounding, so never "1.5MiB").
 */
export function formatExactBytes(n: number): string {
  for (const [unit, size] of [['GiB', 1024 ** 3], ['MiB', 1024 ** 2], ['KiB', 1024]] as const) {
    if (n >= size && n % size === 0) return `${n / size} ${unit}`;
  }
  return `${n} bytes`;
}

/** 450ms, 2.5s, 1.2m: for spans of a run. */
export function formatMs(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${+(ms / 1000).toFixed(1)}s`;
  return `${+(ms / 60_000).toFixed(1)}m`;
}

/** 42s, 5m07s, 3h12m, 2d4h: for ages, like ps. */
export function formatAge(ms: number): string {
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
  return `${Math.floor(s / 86_400)}d${Math.floor((s % 86_400) / 3600)}h`;
}

/** 'text' in single quotes, for a name in a message; a control character in it (a newline) escaped, JSON's way. */
export function quoted(text: string): string {
  const safe = /[\x00-\x1f\x7f]/.test(text) ? JSON.stringify(text).slice(1, -1) : text;
  return `'${safe}'`;
}
