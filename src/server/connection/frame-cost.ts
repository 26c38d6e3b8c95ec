/**
 * What a JSON frame will hold once parsed, told from its raw bytes before it is parsed.
 *
 * A parsed JSON text costs the heap about its bytes for its strings (a big base64 chunk is
 * one flat string), plus tens of bytes for every value: an empty object `{}` costs V8 about
 * 67 bytes, `[]` 43, a key of a big object 74, a number or empty string 10. So a 16 MiB
 * frame of `{},{},…` holds some 357 MiB once parsed while counting 16 MiB. The number of
 * values is bounded by the structural characters outside strings (`{`, `[`, `,`, `:`), which
 * one pass over the bytes counts cheaply (strings are skipped with `indexOf`, so a big
 * base64 chunk costs next to nothing); each is charged `BYTES_PER_JSON_VALUE`.
 *
 * The same pass picks up the top-level `id`, so a frame refused unparsed is still answered
 * with its own id. Pure (no sockets): test/unit/server/connection/frame-cost.test.ts.
 */

/**
 * Heap bytes charged per structural character. A value costs at most 74 bytes measured (a key
 * of a big object), and every value but the first has at least two (`{` and `,`, or `:` and
 * `,`), so 64 each covers it with room.
 */
export const BYTES_PER_JSON_VALUE = 64;

/** Longest id (in bytes) picked up from an unparsed frame; a longer one is answered with `id: null`. */
const MAX_ID_BYTES = 1024;

export interface FrameCost {
  /** `{`, `[`, `,` and `:` outside strings. */
  structural: number;
  /** The estimated heap bytes of the parsed frame: its bytes plus `BYTES_PER_JSON_VALUE` per structural character. */
  cost: number;
  /** The top-level `id` when it is a string or an integer (null when absent, null or unreadable). */
  id: string | number | null;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** Where the string opened at `start` (the quote) ends: the index of its closing quote, or -1. */
function stringEnd(buf: Buffer, start: number): number {
  let at = start + 1;
  for (;;) {
    const quote = buf.indexOf(QUOTE, at);
    if (quote < 0) return -1;
    let slashes = 0;
    while (buf[quote - 1 - slashes] === BACKSLASH) slashes++;
    if (slashes % 2 === 0) return quote;
    at = quote + 1;
  }
}

export function frameCost(buf: Buffer): FrameCost {
  let structural = 0;
  let depth = 0;
  /** The last string closed at depth 1 (a key if a `:` follows). */
  let keyStart = -1;
  let keyEnd = -1;
  let idAt = -1;
  const n = buf.length;
  for (let i = 0; i < n; i++) {
    const c = buf[i]!;
    if (c === QUOTE) {
      const end = stringEnd(buf, i);
      if (end < 0) break; // unterminated: the parse will say so
      if (depth === 1) {
        keyStart = i + 1;
        keyEnd = end;
      }
      i = end;
      continue;
    }
    if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      structural++;
      depth++;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      depth--;
    } else if (c === 0x2c /* , */) {
      structural++;
    } else if (c === 0x3a /* : */) {
      structural++;
      if (depth === 1 && keyEnd - keyStart === 2 && buf[keyStart] === 0x69 && buf[keyStart + 1] === 0x64) idAt = i + 1;
    }
  }
  return { structural, cost: buf.length + structural * BYTES_PER_JSON_VALUE, id: idAt < 0 ? null : readId(buf, idAt) };
}

/** The id value starting at `at` (after its colon), if it is a short string or an integer. */
function readId(buf: Buffer, at: number): string | number | null {
  while (at < buf.length && (buf[at] === 0x20 || buf[at] === 0x09 || buf[at] === 0x0a || buf[at] === 0x0d)) at++;
  let end: number;
  if (buf[at] === QUOTE) {
    const close = stringEnd(buf, at);
    if (close < 0) return null;
    end = close + 1;
  } else {
    end = at;
    while (end < buf.length && end - at <= 32 && (buf[end] === 0x2d || (buf[end]! >= 0x30 && buf[end]! <= 0x39))) end++;
    // A fraction or an exponent: not an integer id.
    if (buf[end] === 0x2e || buf[end] === 0x65 || buf[end] === 0x45) return null;
  }
  if (end === at || end - at > MAX_ID_BYTES) return null;
  try {
    const id = JSON.parse(buf.toString('utf8', at, end)) as unknown;
    return typeof id === 'string' || (typeof id === 'number' && Number.isSafeInteger(id)) ? id : null;
  } catch {
    return null;
  }
}
