/** Small helpers for the client tests. */
import type { Readable } from 'node:stream';
import type { ExecProcess } from '../../src/client/index.js';

/** Reads a stream to its end as UTF-8. */
export async function collect(stream: Readable): Promise<string> {
  const parts: Buffer[] = [];
  for await (const chunk of stream) parts.push(chunk as Buffer);
  return Buffer.concat(parts).toString('utf8');
}

/** Everything `proc` printed on stdout so far, as it arrives (a tty merges stdout and stderr). */
export function stdoutSoFar(proc: ExecProcess): () => string {
  let text = '';
  proc.stdout.on('data', (d: Buffer) => (text += d.toString()));
  return () => text;
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

/** Resolves once `path` exists (watching its directory; no polling guesses). */
export async function waitForFile(path: string): Promise<void> {
  const { watch, existsSync } = await import('node:fs');
  const { dirname } = await import('node:path');
  if (existsSync(path)) return;
  await new Promise<void>((resolve) => {
    const watcher = watch(dirname(path), () => {
      if (existsSync(path)) {
        watcher.close();
        resolve();
      }
    });
    if (existsSync(path)) {
      watcher.close();
      resolve();
    }
  });
}
