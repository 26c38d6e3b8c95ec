/**
 * Can a `process/output` chunk be decoded straight from the frame's bytes, without making a
 * string first? `node bench/base64-from-bytes.ts` (plain JS-compatible TypeScript: runs with
 * Node's type stripping or `--import tsx`, on any Node version CI runs).
 *
 * It reports which APIs this Node has that take base64 (all of them take a string), and times,
 * per MiB decoded from a 64 KiB chunk's base64 inside a frame: what the client does now (a
 * latin1 slice of the frame, then `Buffer.from(text, 'base64')`), the same through
 * `Uint8Array.fromBase64` where it exists, and a JS decoder reading the frame's bytes into a
 * reused buffer (no string, no allocation).
 */
import { performance } from 'node:perf_hooks';

const CHUNK = 64 * 1024;
const ROUNDS = Number(process.env.B64_ROUNDS ?? 400);

const raw = Buffer.alloc(CHUNK);
for (let i = 0; i < CHUNK; i++) raw[i] = (i * 7919) & 0xff;
const prefix = Buffer.from('{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdout","chunk":"');
const frame = Buffer.concat([prefix, Buffer.from(raw.toString('base64')), Buffer.from('"}}')]);
const start = prefix.length;
const end = frame.length - 3;

const TABLE = new Int16Array(256).fill(-1);
'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'.split('').forEach((c, i) => (TABLE[c.charCodeAt(0)] = i));

/** Decodes frame[from, to) (padded base64) into `into`; returns the byte count, or -1 if it is not base64. */
function decodeBytes(bytes: Uint8Array, from: number, to: number, into: Uint8Array): number {
  let out = 0;
  let pad = 0;
  if (to - from >= 1 && bytes[to - 1] === 0x3d) pad++;
  if (to - from >= 2 && bytes[to - 2] === 0x3d) pad++;
  const full = to - pad - ((to - from - pad) % 4);
  for (let i = from; i < full; i += 4) {
    const n = (TABLE[bytes[i]!]! << 18) | (TABLE[bytes[i + 1]!]! << 12) | (TABLE[bytes[i + 2]!]! << 6) | TABLE[bytes[i + 3]!]!;
    if (n < 0) return -1;
    into[out++] = n >> 16;
    into[out++] = (n >> 8) & 0xff;
    into[out++] = n & 0xff;
  }
  const rest = to - pad - full;
  if (rest >= 2) {
    const n = (TABLE[bytes[full]!]! << 18) | (TABLE[bytes[full + 1]!]! << 12) | (rest === 3 ? TABLE[bytes[full + 2]!]! << 6 : 0);
    if (n < 0) return -1;
    into[out++] = n >> 16;
    if (rest === 3) into[out++] = (n >> 8) & 0xff;
  }
  return out;
}

const into = Buffer.allocUnsafe(CHUNK);
const fromBase64 = (Uint8Array as unknown as { fromBase64?: (s: string) => Uint8Array }).fromBase64;
const ways: Array<[string, () => Uint8Array]> = [
  ['latin1 slice + Buffer.from(base64) (now)', () => Buffer.from(frame.toString('latin1', start, end), 'base64')],
  ['JS decoder from the bytes (no string)', () => into.subarray(0, decodeBytes(frame, start, end, into))],
];
if (fromBase64) ways.push(['latin1 slice + Uint8Array.fromBase64', () => fromBase64(frame.toString('latin1', start, end))]);

for (const [name, decode] of ways) {
  if (!Buffer.from(decode()).equals(raw)) throw new Error(`${name}: wrong bytes`);
}
const times = new Map<string, number[]>();
for (let block = 0; block < 10; block++) {
  for (const [name, decode] of block % 2 ? [...ways].reverse() : ways) {
    const t0 = performance.now();
    for (let i = 0; i < ROUNDS / 10; i++) decode();
    times.set(name, [...(times.get(name) ?? []), performance.now() - t0]);
  }
}
const mibs = ((ROUNDS / 10) * CHUNK) / 1024 / 1024;
process.stdout.write(
  `Node ${process.version}: APIs taking base64: Buffer.from(string), buf.write(string, 'base64')` +
    `${fromBase64 ? ', Uint8Array.fromBase64(string)' : ''}; none takes bytes\n`,
);
for (const [name, ts] of times) {
  const sorted = [...ts].sort((a, b) => a - b);
  process.stdout.write(`  ${name}: ${(sorted[Math.floor(sorted.length / 2)]! / mibs).toFixed(2)} ms per MiB\n`);
}
