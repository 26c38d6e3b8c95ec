/**
 * How a read of a child's output becomes chunks of its log. Pure.
 *
 * A read (up to 256 KiB) larger than a chunk may be (64 KiB for a Codex client, which may
 * read back in small steps and keeps a small retention) goes in as several chunks; and a
 * read that does not fit what is left of the block being filled is split there, so blocks
 * are filled to the end (memory held is about the bytes kept, not a block per read).
 */
import type { OutputStream } from '../../protocol/index.js';

/** Largest chunk joined from reads for a client without extensions (what one pipe read gives). */
export const CODEX_MAX_CHUNK_BYTES = 64 * 1024;

/** The largest chunk for a client: a Codex client (no acks) gets chunks the size of a pipe read at most. */
export function chunkLimit(maxChunkBytes: number, clientAcks: boolean): number {
  return clientAcks ? maxChunkBytes : Math.min(maxChunkBytes, CODEX_MAX_CHUNK_BYTES);
}

/** Where the chunks' bytes are copied (a ByteArena): `fits` is what the block being filled has left. */
export interface ChunkMemory {
  readonly fits: number;
  copy(bytes: Uint8Array): Buffer;
}

/** Copies `data` into `memory` and appends it to `log` as chunks of at most `maxChunkBytes`. */
export function appendRead(
  log: { append(stream: OutputStream, data: Buffer): void },
  memory: ChunkMemory,
  maxChunkBytes: number,
  stream: OutputStream,
  data: Buffer,
): void {
  for (let at = 0; at < data.length; ) {
    const n = Math.min(maxChunkBytes, data.length - at, memory.fits);
    log.append(stream, memory.copy(data.subarray(at, at + n)));
    at += n;
  }
}
