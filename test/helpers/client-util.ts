/** Small helpers for the client tests. */
import type { Readable } from 'node:stream';

/** Reads a stream to its end as UTF-8. */
export async function collect(stream: Readable): Promise<string> {
  const parts: Buffer[] = [];
  for await (const chunk of stream) parts.push(chunk as Buffer);
  return Buffer.concat(parts).toString('utf8');
}

/** Resolves on the first event `name` whose payload satisfies `predicate`. */
export function waitFor<T>(emitter: NodeJS.EventEmitter, name: string, predicate: (value: T) => boolean = () => true): Promise<T> {
  return new Promise((resolve) => {
    const listener = (value: T) => {
      if (!predicate(value)) return;
      emitter.off(name, listener);
      resolve(value);
    };
    emitter.on(name, listener);
  });
}
