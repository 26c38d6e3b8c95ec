/** A promise with its resolve and reject in hand. */
export interface Deferred<T> {
  promise: Promise<T>;
  resolve: (value: T) => void;
  reject: (error: Error) => void;
}

/**
 * `observed` (default true) attaches a no-op rejection handler, for promises whose failure
 * is also reported elsewhere (events, streams): an unobserved one must not crash the program.
 */
export function deferred<T>(observed = true): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: Error) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  if (observed) promise.catch(() => {});
  return { promise, resolve, reject };
}
