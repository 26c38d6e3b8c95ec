/**
 * What the pieces of a `process/write` request cost on the server in a hot loop (bench/README.md,
 * "The two misses that hold in every run"): `json-rpc-2.0`'s dispatch against a direct call,
 * zod's check of the params, and `JSON.parse` of the request's text. Each is under a
 * microsecond here, against the tens of µs a message costs crossing a process that has just
 * woken: the length of the path, not one function. `node --import tsx bench/hot-pieces.ts`.
 */
import { JSONRPCServer } from 'json-rpc-2.0';
import { ProcessWriteParamsSchema } from '../src/protocol/schemas.js';

const CALLS = Number(process.env.BENCH_HOT_CALLS ?? 200_000);
const ROUNDS = 3;

const params = { processId: 'bench-echo-1', chunk: Buffer.from('echo-1\n').toString('base64'), writeId: 'bench-echo-1-w1' };
const request = { jsonrpc: '2.0' as const, id: 1, method: 'process/write', params };
const text = JSON.stringify(request);
const handler = (): { status: string } => ({ status: 'accepted' });
const server = new JSONRPCServer();
server.addMethod('process/write', handler);

/** µs per call of `fn`, `CALLS` times. */
async function perCall(fn: () => unknown): Promise<number> {
  const started = performance.now();
  for (let i = 0; i < CALLS; i++) await fn();
  return ((performance.now() - started) / CALLS) * 1000;
}

for (let round = 1; round <= ROUNDS; round++) {
  const dispatch = await perCall(() => server.receive(request));
  const direct = await perCall(() => Promise.resolve(handler()).then((result) => ({ jsonrpc: '2.0', id: request.id, result })));
  const zod = await perCall(() => ProcessWriteParamsSchema.safeParse(params));
  const parse = await perCall(() => JSON.parse(text));
  const f = (us: number): string => `${us.toFixed(2)} µs`;
  process.stdout.write(`round ${round}: json-rpc-2.0 dispatch ${f(dispatch)} (direct ${f(direct)}), zod process/write ${f(zod)}, JSON.parse ${f(parse)}\n`);
}
