/**
 * What one /mcp request body will hold, told from its raw bytes before it is parsed (pure),
 * with the server's frame cost (src/server/connection/frame-cost.ts): its bytes, plus
 * `BYTES_PER_JSON_VALUE` for every value its structure makes once parsed, plus its bytes once
 * more for the text it is held as while it is served. A 4 MiB `_meta` of `{},{},…` weighs
 * some 180 MB (what parsing it would make), a 4 MiB base64 string about 8 MiB.
 */
import { frameCost } from '../../server/connection/index.js';

export interface RequestWeight {
  /** Estimated bytes held while the request is served. */
  weight: number;
  /** The top-level `id`, read unparsed, to answer a refusal with (null when unreadable). */
  id: string | number | null;
}

export function requestWeight(body: Buffer): RequestWeight {
  const { cost, id } = frameCost(body);
  return { weight: cost + body.length, id };
}
