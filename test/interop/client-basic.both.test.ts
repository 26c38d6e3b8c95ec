/**
 * ExecClient basics against the target server (tether in `npm test`, Codex in interop):
 * spawn, ordered output on the right streams, exit codes, stdin, tty, errors.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExecClient, type ProcessEvent } from '../../src/client/index.js';
import { RpcError } from '../../src/protocol/index.js';
import { isCodex, startTarget, type Target } from '../helpers/target.js';
import { collect } from '../helpers/client-util.js';

let target: Target;
let client: ExecClient;

beforeAll(async () => {
  target = await startTarget();
  client = await ExecClient.connect(target.url, { clientName: 'client-basic-test' });
});

afterAll(async () => {
  await client?.close();
  await target?.stop();
});

describe('ExecClient basics', () => {
  it('connects with a session id and reports environment info', async () => {
    expect(client.state).toBe('connected');
    expect(client.sessionId).toMatch(/[0-9a-f-]{8,}/);
    expect(client.generation).toBe(1);
    const info = await client.environmentInfo();
    expect(info.cwd).toMatch(/^file:\/\//);
  });

  it('spawns, separates stdout and stderr, and resolves the exit code', async () => {
    const proc = client.spawn(['sh', '-c', 'echo out; echo err >&2; exit 3']);
    const spawned = new Promise<void>((resolve) => proc.once('spawn', resolve));
    const [stdout, stderr, code] = await Promise.all([collect(proc.stdout), collect(proc.stderr), proc.exited]);
    await spawned;
    expect(stdout).toBe('out\n');
    expect(stderr).toBe('err\n');
    expect(code).toBe(3);
    await proc.closed;
    expect(proc.exitCode).toBe(3);
  });

  it('yields ordered events through the async iterator, ending with exit and close', async () => {
    const proc = client.spawn(['sh', '-c', 'for i in 1 2 3; do echo $i; done']);
    const events: ProcessEvent[] = [];
    for await (const event of proc) events.push(event);
    const seqs = events.map((e) => e.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(events.at(-1)?.type).toBe('close');
    expect(events.filter((e) => e.type === 'exit')).toEqual([expect.objectContaining({ exitCode: 0 })]);
    const text = events.flatMap((e) => (e.type === 'output' ? [e.data.toString()] : [])).join('');
    expect(text).toBe('1\n2\n3\n');
  });

  it('writes stdin with backpressure callbacks and echoes it back', async () => {
    const proc = client.spawn(['sh', '-c', 'head -n 2'], { pipeStdin: true });
    const out = collect(proc.stdout);
    await new Promise<void>((resolve, reject) => proc.stdin!.write('one\n', (err) => (err ? reject(err) : resolve())));
    await new Promise<void>((resolve, reject) => proc.stdin!.write('two\n', (err) => (err ? reject(err) : resolve())));
    expect(await proc.exited).toBe(0);
    expect(await out).toBe('one\ntwo\n');
  });

  it('sends a large write in pieces, in order (servers cap message sizes)', async () => {
    const proc = client.spawn(['sh', '-c', 'head -c 3145728 | md5sum'], { pipeStdin: true });
    const out = collect(proc.stdout);
    const data = Buffer.alloc(3 * 1024 * 1024);
    for (let i = 0; i < data.length; i++) data[i] = (i * 7 + (i >> 10)) & 0xff;
    await new Promise<void>((resolve, reject) => proc.stdin!.write(data, (err) => (err ? reject(err) : resolve())));
    expect(await proc.exited).toBe(0);
    const { createHash } = await import('node:crypto');
    expect((await out).split(' ')[0]).toBe(createHash('md5').update(data).digest('hex'));
  });

  it('runs on a pty when tty is set (output on stdout)', async () => {
    const proc = client.spawn(['sh', '-c', 'test -t 1 && echo is-a-tty'], { tty: true });
    const out = collect(proc.stdout);
    expect(await proc.exited).toBe(0);
    expect(await out).toContain('is-a-tty');
  });

  it('interrupts and terminates with 128+N exit codes', async () => {
    const a = client.spawn(['sleep', '30']);
    await new Promise((resolve) => a.once('spawn', resolve));
    await a.kill('SIGINT');
    expect(await a.exited).toBe(130);
    const b = client.spawn(['sleep', '30']);
    await new Promise((resolve) => b.once('spawn', resolve));
    expect(await b.terminate()).toBe(true);
    expect(await b.exited).toBe(137);
  });

  it('fails a spawn of a missing program with the server error, not a hang', async () => {
    const proc = client.spawn(['/nonexistent/program']);
    await expect(proc.exited).rejects.toBeInstanceOf(RpcError);
    expect(proc.error).toBeInstanceOf(RpcError);
  });

  // Issue #23: a relative cwd resolves on the server; the error must say what failed. Codex's
  // message is the OS's alone; tether names the program or the directory before it.
  it('a start failure names the missing program, or the missing cwd with its path on the server', async () => {
    const ENOENT = 'No such file or directory (os error 2)';
    const program = client.spawn(['/nonexistent/program']);
    const programError = await program.exited.then(() => undefined, (err: unknown) => err);
    expect(programError).toBeInstanceOf(RpcError);
    expect((programError as RpcError).message).toBe(isCodex ? ENOENT : `cannot start '/nonexistent/program': ${ENOENT}`);
    if (!isCodex) expect((programError as RpcError).data).toEqual({ stage: 'exec', code: 'ENOENT' });

    const serverCwd = fileURLToPath((await client.environmentInfo()).cwd);
    const directory = client.spawn(['true'], { cwd: 'no-such-dir-23' });
    const directoryError = await directory.exited.then(() => undefined, (err: unknown) => err);
    expect(directoryError).toBeInstanceOf(RpcError);
    expect((directoryError as RpcError).message).toBe(isCodex ? ENOENT : `cannot start 'true': cwd '${join(serverCwd, 'no-such-dir-23')}': ${ENOENT}`);
    if (!isCodex) expect((directoryError as RpcError).data).toEqual({ stage: 'cwd', code: 'ENOENT' });
  });

  it('keeps output that arrives before the start answer (client-chosen id)', async () => {
    const proc = client.spawn(['echo', 'early'], { processId: 'early-bird' });
    expect(proc.id).toBe('early-bird');
    expect(await collect(proc.stdout)).toBe('early\n');
  });

  it('refuses bad argv synchronously', () => {
    expect(() => client.spawn([])).toThrow(TypeError);
  });

  it('refuses bad options with a clear error', async () => {
    await expect(ExecClient.connect('http://127.0.0.1:1')).rejects.toThrow(/ws:\/\/ or wss:\/\//);
    await expect(ExecClient.connect(target.url, { recoveryDeadlineMs: -1 })).rejects.toThrow(/recoveryDeadlineMs must be/);
  });
});
