/**
 * `file:` URIs <-> native paths, the way Codex's PathUri does it: WHATWG parsing (Node's URL
 * and Rust's url crate agree), then checks with Codex's texts. Paths are kept as bytes
 * (Buffers) so a file name that is not UTF-8 survives the round trip, and URIs are built
 * with rust-url's path-segment escaping so both servers name the same file the same way.
 */
import { invalidParams, invalidRequest } from '../../protocol/index.js';
import type { NativePath } from '../backend/index.js';

const SCHEME = /^[\t\n\f\r ]*[A-Za-z][A-Za-z0-9+.-]*:/;

/** Parses a `file:` URI; throws Codex's -32602/-32600 errors. `what` names the member in tether's own texts. */
export function parsePathUri(input: string): NativePath {
  let url: URL;
  try {
    url = new URL(input);
  } catch {
    throw invalidParams(`invalid URI: ${SCHEME.test(input) ? 'invalid international domain name' : 'relative URL without a base'}`);
  }
  if (url.protocol !== 'file:') throw invalidParams(`unsupported path URI scheme \`${url.protocol.slice(0, -1)}\``);
  if (url.href.includes('?')) throw invalidParams('query parameters are not allowed in path URIs');
  if (url.hash !== '' || url.href.includes('#')) throw invalidParams('fragments are not allowed in path URIs');
  if (url.host !== '') throw invalidRequest(`'${url.href}' is invalid on 'linux'`);
  const bytes = normalize(percentDecode(url.pathname));
  if (bytes.includes(0)) throw invalidParams(`'${url.href}' is invalid on 'linux'`);
  return { bytes, display: bytes.toString('utf8') };
}

/** A native path from bytes or a string (for paths the server builds itself). */
export function nativePath(path: Buffer | string): NativePath {
  const bytes = typeof path === 'string' ? Buffer.from(path) : path;
  return { bytes, display: bytes.toString('utf8') };
}

/** `parent/name` as bytes. */
export function joinPath(parent: Buffer, name: Buffer): Buffer {
  const slash = parent.length > 0 && parent[parent.length - 1] === 0x2f;
  return Buffer.concat(slash ? [parent, name] : [parent, Buffer.from('/'), name]);
}

/**
 * The `file:` URI of an absolute path, escaped as Codex escapes it (controls, space,
 * `"#%<>?\\\`{}` and every non-ASCII byte), so both servers name a file the same way.
 */
export function pathToUri(path: Buffer | string): string {
  const bytes = typeof path === 'string' ? Buffer.from(path) : path;
  let out = 'file://';
  for (const byte of bytes) {
    out += escapes(byte) ? `%${byte.toString(16).toUpperCase().padStart(2, '0')}` : String.fromCharCode(byte);
  }
  return bytes.length === 0 ? `${out}/` : out;
}

const ESCAPED_ASCII = new Set([...' "#%<>?\\`{}'].map((c) => c.charCodeAt(0)));

function escapes(byte: number): boolean {
  return byte < 0x20 || byte >= 0x7f || ESCAPED_ASCII.has(byte);
}

function percentDecode(text: string): Buffer {
  const out: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x25 && i + 2 < text.length && /^[0-9A-Fa-f]{2}$/.test(text.slice(i + 1, i + 3))) {
      out.push(parseInt(text.slice(i + 1, i + 3), 16));
      i += 2;
    } else if (c < 0x80) {
      out.push(c);
    } else {
      out.push(...Buffer.from(text[i]!));
    }
  }
  return Buffer.from(out);
}

/** Collapses repeated slashes and drops a trailing one (Codex's absolute-path normal form). */
function normalize(bytes: Buffer): Buffer {
  const parts = bytes.toString('latin1').split('/').filter((p) => p !== '');
  return Buffer.from(`/${parts.join('/')}`, 'latin1');
}
