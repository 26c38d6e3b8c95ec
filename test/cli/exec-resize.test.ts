/**
 * tether-only: the terminal size of a tty process (extension processResize): its initial
 * size from `process/start`, `process/resize`, and `tether exec --tty` following the local
 * terminal — a real one, in tmux, resized as a person would.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExecClient } from '../../src/client/index.js';
import { startServer, type TetherServer } from '../../src/server/index.js';
import { stdoutSoFar } from '../helpers/client-util.js';
import { RawClient } from '../helpers/raw-client.js';
import { TETHER_BIN } from '../helpers/serve-process.js';
import { shellCommand, tmuxAndServer } from '../helpers/tmux.js';

describe('process/resize', () => {
  let server: TetherServer;

  beforeAll(async () => {
    server = await startServer({ port: 0 });
  });

  afterAll(() => server.close());

  it('starts the terminal at the size asked, and follows each resize', async () => {
    const client = await ExecClient.connect(server.url);
    expect(client.extensions.has('processResize')).toBe(true);
    const proc = client.spawn(['sh', '-c', 'stty size; read x; stty size; read x; stty size'], { tty: true, terminalSize: { cols: 150, rows: 40 } });
    const output = stdoutSoFar(proc);
    await expect.poll(output).toContain('40 150');
    expect(await proc.resize(100, 30)).toBe(true);
    proc.stdin!.write('\n');
    await expect.poll(output).toMatch(/40 150[\s\S]*30 100/);
    // A burst: the last size wins.
    await Promise.all([proc.resize(81, 25), proc.resize(82, 26), proc.resize(120, 50)]);
    proc.stdin!.write('\n');
    expect(await proc.exited).toBe(0);
    await proc.closed;
    expect(output().trim().split(/\r?\n/).filter((l) => /^\d+ \d+$/.test(l.trim())).map((l) => l.trim())).toEqual(['40 150', '30 100', '50 120']);
    await client.close();
  });

  it('refuses what cannot be resized, and exists only for sessions that asked for it', async () => {
    const client = await ExecClient.connect(server.url);
    const piped = client.spawn(['sleep', '5']);
    await expect(piped.resize(80, 24)).rejects.toThrow(/no terminal/);
    const tty = client.spawn(['sleep', '5'], { tty: true });
    await expect(tty.resize(0, 24)).rejects.toThrow(/cols must be an integer in 1\.\.65535/);
    await client.close();

    const raw = await RawClient.connect(server.url);
    try {
      await raw.request('initialize', { clientName: 'raw', tether: { version: 1, extensions: ['processResize'] } });
      raw.notify('initialized', {});
      const start = { argv: ['sleep', '5'], cwd: 'file:///tmp', env: {}, pipeStdin: false };
      await raw.request('process/start', { ...start, processId: 'pipe', tty: false });
      await raw.request('process/start', { ...start, processId: 'term', tty: true });
      await expect(raw.request('process/resize', { processId: 'pipe', cols: 80, rows: 24 })).rejects.toMatchObject({
        code: -32602,
        error: { message: 'invalid params for process/resize: processId: pipe has no terminal (it was started without tty)' },
      });
      await expect(raw.request('process/resize', { processId: 'term', cols: 0, rows: 24 })).rejects.toMatchObject({ code: -32602, error: { message: expect.stringMatching(/cols: must be at least 1/) } });
      await expect(raw.request('process/resize', { processId: 'term', cols: 80, rows: 70000 })).rejects.toMatchObject({ code: -32602 });
      await expect(raw.request('process/resize', { processId: 'nope', cols: 80, rows: 24 })).rejects.toMatchObject({ code: -32600 });
      expect(await raw.request('process/resize', { processId: 'term', cols: 132, rows: 43 })).toEqual({});
    } finally {
      raw.close();
    }

    const codexLike = await RawClient.connect(server.url);
    try {
      await codexLike.request('initialize', { clientName: 'codex' });
      codexLike.notify('initialized', {});
      await expect(codexLike.request('process/resize', { processId: 'x', cols: 80, rows: 24 })).rejects.toMatchObject({ code: -32601 });
    } finally {
      codexLike.close();
    }
  });

  it('without the extension the terminal is 80x24 whatever was asked, and resize says it could not', async () => {
    const client = await ExecClient.connect(server.url, { extensions: [] });
    const proc = client.spawn(['stty', 'size'], { tty: true, terminalSize: { cols: 150, rows: 40 } });
    const output = stdoutSoFar(proc);
    expect(await proc.resize(100, 30)).toBe(false);
    await proc.closed;
    expect(output().trim()).toBe('24 80');
    await client.close();
  });
});

describe('tether exec --tty in a real terminal (tmux)', () => {
  const bed = tmuxAndServer(`tether-test-${process.pid}`);
  const { tmux } = bed;

  it('the remote stty size is the local terminal size, and follows a resize', async () => {
    const command = shellCommand([process.execPath, TETHER_BIN, 'exec', '--tty', '--url', bed.server.url, '--', 'sh']);
    tmux('new-session', '-d', '-s', 'resize', '-x', '150', '-y', '40', command);
    const screen = () => tmux('capture-pane', '-p', '-t', 'resize');
    // The remote shell is up once its prompt shows (capture-pane drops trailing spaces).
    await expect.poll(screen, { timeout: 15_000 }).toMatch(/^[$#] ?$/m);
    tmux('send-keys', '-t', 'resize', 'stty size', 'Enter');
    await expect.poll(screen, { timeout: 10_000 }).toMatch(/^40 150$/m);
    tmux('resize-window', '-t', 'resize', '-x', '100', '-y', '30');
    tmux('send-keys', '-t', 'resize', 'clear; stty size', 'Enter');
    await expect.poll(screen, { timeout: 10_000 }).toMatch(/^30 100$/m);
    tmux('send-keys', '-t', 'resize', 'exit', 'Enter');
  });
});
