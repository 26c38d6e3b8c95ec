/**
 * The relay's `http/request` work: the request is made by the upstream server, buffered
 * there (its cap: 8 MiB on tether, a larger body is its -32602 "ask with streamResponse"), and
 * handed to the relay's server as a response whose body is one piece; a downstream
 * `streamResponse` gets it as one delta and `done`. Through a cut: a GET or HEAD — which has
 * streamed nothing downstream yet, since nothing streams before the upstream answered — is
 * re-sent; any other method is sent once, and a lost answer is "outcome unknown" (-32603).
 * There is no resumable `http/request` extension (yet): a streamed upstream body would need one.
 */
import { randomUUID } from 'node:crypto';
import { type ExecClient, OutcomeUnknownError } from '../client/index.js';
import { internalError } from '../protocol/index.js';
import type { HttpRequestWork, HttpResponseLike } from '../server/backend/index.js';

interface UpstreamAnswer {
  status: number;
  headers: Array<{ name: string; value: string }>;
  bodyBase64: string;
}

export async function remoteHttpRequest(client: ExecClient, work: HttpRequestWork): Promise<HttpResponseLike> {
  // The upstream has its own connect and idle timeouts; ours are not the upstream's idleness.
  work.deadlines.pause();
  const params = {
    method: work.method,
    url: work.url.href,
    headers: work.headers,
    ...(work.body ? { bodyBase64: work.body.toString('base64') } : {}),
    ...(work.timeoutMs !== undefined && work.timeoutMs !== null ? { timeoutMs: work.timeoutMs } : {}),
    requestId: randomUUID(),
    redirectPolicy: work.follow ? 'follow' : 'stop',
  };
  const resend = work.method === 'GET' || work.method === 'HEAD';
  let answer: UpstreamAnswer;
  try {
    answer = await abortable(client.request<UpstreamAnswer>('http/request', params, { resend }), work.signal);
  } catch (err) {
    if (err instanceof OutcomeUnknownError) throw internalError(`http/request ${err.message}`);
    throw err;
  }
  work.deadlines.activity();
  let body: Buffer | null = Buffer.from(answer.bodyBase64, 'base64');
  return {
    status: answer.status,
    headers: answer.headers,
    contentLength: body.length,
    destroy: () => {
      body = null;
    },
    async *[Symbol.asyncIterator]() {
      if (body && body.length > 0) yield body;
      body = null;
    },
  };
}

function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err as Error);
      },
    );
  });
}
