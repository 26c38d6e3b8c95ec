/**
 * Durations given to the library are checked like the CLI's: a Node timer fires a delay past
 * 2^31-1 ms after 1 ms, so a 1000 h session TTL would expire every detached session at once.
 */
import { describe, expect, it } from 'vitest';
import { ExecClient } from '../../src/client/index.js';
import { startServer } from '../../src/server/index.js';

describe('duration options past what a timer holds', () => {
  it('startServer refuses them, naming the option, before listening', async () => {
    await expect(startServer({ port: 0, sessionTtlMs: 1000 * 3600 * 1000 })).rejects.toThrow(
      /^startServer: sessionTtlMs must be at most 2147483647 ms/,
    );
    await expect(startServer({ port: 0, stallTimeoutMs: -1 })).rejects.toThrow(/stallTimeoutMs must be a non-negative number/);
  });

  it('ExecClient.connect refuses them, naming the option, before connecting', async () => {
    await expect(ExecClient.connect('ws://127.0.0.1:9', { recoveryDeadlineMs: 2 ** 31 })).rejects.toThrow(
      /recoveryDeadlineMs must be at most 2147483647 ms/,
    );
    await expect(ExecClient.connect('ws://127.0.0.1:9', { keepaliveTimeoutMs: Number.NaN })).rejects.toThrow(TypeError);
  });
});
