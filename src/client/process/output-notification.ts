/**
 * A `process/output` notification read without decoding and JSON-parsing its chunk (relay
 * throughput: a client in the Codex dialect receives all output as JSON text frames, and the relay in
 * front of a Codex exec-server spent most of its receiving CPU in `toString('utf8')` and
 * `JSON.parse` scanning base64). The frame is parsed as JSON with the chunk's value cut out,
 * and the chunk is taken as a latin1 slice of the frame (base64 is ASCII: the same string).
 *
 * Only when that is certainly the same as parsing the whole frame; otherwise null, and the
 * caller parses it as usual: the frame has no backslash (no escape anywhere, so every quote is
 * a string's start or end and `"chunk":"` is a key), `"chunk"` occurs once, and what is parsed
 * is a `process/output` notification whose `params.chunk` is the value cut out. Pure.
 */

/** Smaller frames are parsed whole: the cut saves nothing worth the checks. */
export const MIN_FAST_BYTES = 1024;

const CHUNK_KEY = Buffer.from('"chunk":"');
const CHUNK_NAME = Buffer.from('"chunk"');
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

export function peekOutputNotification(frame: Buffer): { method: string; params: Record<string, unknown> } | null {
  if (frame.length < MIN_FAST_BYTES || frame.indexOf(BACKSLASH) !== -1) return null;
  const key = frame.indexOf(CHUNK_KEY);
  if (key === -1 || frame.indexOf(CHUNK_NAME, key + 1) !== -1 || frame.indexOf(CHUNK_NAME) !== key) return null;
  const start = key + CHUNK_KEY.length;
  const end = frame.indexOf(QUOTE, start);
  if (end === -1) return null;
  let value: unknown;
  try {
    value = JSON.parse(frame.toString('utf8', 0, start) + frame.toString('utf8', end));
  } catch {
    return null;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return null;
  const raw = value as Record<string, unknown>;
  if (raw.method !== 'process/output' || 'id' in raw || (raw.jsonrpc !== undefined && raw.jsonrpc !== '2.0')) return null;
  const params = raw.params;
  if (params === null || typeof params !== 'object' || Array.isArray(params)) return null;
  const p = params as Record<string, unknown>;
  if (p.chunk !== '') return null;
  p.chunk = frame.toString('latin1', start, end);
  return { method: 'process/output', params: p };
}
