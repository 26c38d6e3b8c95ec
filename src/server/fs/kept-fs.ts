/**
 * The fs part of a session record (restart adoption), as a back-end's scope state gives it
 * (backend/fs-work.ts, `KeptFsRecord`): the live missing-watch (re-armed by the successor, so
 * its `fs/missingChanged` still reaches the client) and the ids of the file handles that were
 * open (their descriptors die with the server: the successor answers their use with an error
 * naming the restart). Paths are NativePath bytes, stored losslessly as base64.
 */
import type { KeptFsRecord, KeptWatchRecord, NativePath } from '../backend/index.js';
import { nativePath } from './uri.js';

/** A watch as the scope holds it. */
export interface WatchSpec {
  watchId: number;
  missing: NativePath[];
  present: NativePath | null;
}

export function encodeWatch(spec: WatchSpec): KeptWatchRecord {
  return {
    watchId: spec.watchId,
    missing: spec.missing.map((p) => p.bytes.toString('base64')),
    present: spec.present ? spec.present.bytes.toString('base64') : null,
  };
}

export function decodeWatch(record: KeptWatchRecord): WatchSpec {
  return {
    watchId: record.watchId,
    missing: record.missing.map((p) => nativePath(Buffer.from(p, 'base64'))),
    present: record.present === null ? null : nativePath(Buffer.from(record.present, 'base64')),
  };
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** Checks the shape of a record's `fs` (throws saying what is wrong). */
export function checkKeptFs(value: unknown): asserts value is KeptFsRecord {
  const fail = (what: string): never => {
    throw new Error(`not a tether session record (fs.${what})`);
  };
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail('not an object');
  const r = value as Record<string, unknown>;
  if (r.handles !== undefined && (!Array.isArray(r.handles) || !r.handles.every((h) => typeof h === 'string'))) fail('handles');
  if (r.watch !== undefined) {
    const w = r.watch as Record<string, unknown>;
    const ok =
      typeof w === 'object' &&
      w !== null &&
      Number.isSafeInteger(w.watchId) &&
      Array.isArray(w.missing) &&
      w.missing.every((p) => typeof p === 'string' && BASE64.test(p)) &&
      (w.present === null || (typeof w.present === 'string' && BASE64.test(w.present)));
    if (!ok) fail('watch');
  }
}
