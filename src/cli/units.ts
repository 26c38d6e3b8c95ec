/**
 * Values on tether's command lines, one syntax for every command:
 * - DURATION: a number with its unit, `500ms`, `30s`, `5m`, `1h` (`1.5s` too). A bare number
 *   is refused: `--session-ttl 30` meant milliseconds to one command and seconds to another;
 * - SIZE: `512B`, `64KiB`, `1MiB`, `1GiB` (KB/MB/GB and K/M/G are the same powers of 1024;
 *   a bare number is bytes);
 * - COUNT: a positive integer; PORT: 0-65535.
 */
import { UsageError } from './usage.js';

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
const SIZE_UNITS: Record<string, number> = {
  b: 1,
  k: 1024,
  kb: 1024,
  kib: 1024,
  m: 1024 ** 2,
  mb: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1024 ** 3,
  gb: 1024 ** 3,
  gib: 1024 ** 3,
};

export const DURATION_SYNTAX = 'DURATION: a number and its unit: 500ms, 30s, 5m, 1h';
export const SIZE_SYNTAX = 'SIZE: 512B, 64KiB, 1MiB, 1GiB (KB/MB/GB are powers of 1024 too; a bare number is bytes)';

/** Node's timers hold at most 2^31-1 ms (24.8 days); a longer one fires after 1 ms. */
const MAX_DURATION_MS = 2 ** 31 - 1;

/** Milliseconds of a positive DURATION (at most 24 days: every duration here becomes a timer). */
export function parseDuration(flag: string, text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  if (m && m[2] === '') throw new UsageError(`${flag}: '${text}' needs a unit (${m[1]}s, ${m[1]}ms, ${m[1]}m…)`);
  const unit = m ? DURATION_UNITS[m[2]!.toLowerCase()] : undefined;
  if (!m || unit === undefined) throw new UsageError(`${flag}: invalid duration '${text}' (expected e.g. 500ms, 30s, 5m)`);
  const ms = Math.round(Number(m[1]) * unit);
  if (ms <= 0) throw new UsageError(`${flag}: the duration must be greater than zero (got '${text}')`);
  if (ms > MAX_DURATION_MS) throw new UsageError(`${flag}: '${text}' is too long (at most 24 days, e.g. 576h)`);
  return ms;
}

/** Bytes of a positive SIZE. */
export function parseSize(flag: string, text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]+)?\s*$/i.exec(text);
  const unit = m ? SIZE_UNITS[(m[2] ?? 'b').toLowerCase()] : undefined;
  if (!m || unit === undefined) throw new UsageError(`${flag}: invalid size '${text}' (expected e.g. 512B, 64KiB, 1MiB, 1GiB)`);
  const bytes = Math.floor(Number(m[1]) * unit);
  if (bytes <= 0) throw new UsageError(`${flag}: the size must be greater than zero (got '${text}')`);
  return bytes;
}

export function parseCount(flag: string, text: string): number {
  if (!/^\s*\d+\s*$/.test(text) || Number(text) <= 0) throw new UsageError(`${flag}: expected a positive integer, got '${text}'`);
  return Number(text);
}

export function parsePort(flag: string, text: string): number {
  const port = Number(text);
  if (!/^\d+$/.test(text) || port > 65535) throw new UsageError(`${flag}: invalid port '${text}' (expected 0-65535)`);
  return port;
}
