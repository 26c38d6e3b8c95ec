/**
 * The filesystem family (`fs/*`, `environmentConfig/read`) over a raw WebSocket, written once
 * and run against tether (`npm test`) and the real Codex exec-server (`npm run test:interop`):
 * the same results, the same error codes and the same message texts (Codex's Rust forms,
 * "No such file or directory (os error 2)"). Where tether deliberately differs the test says so.
 * Runs as root here, so permission errors cannot be provoked (docs/protocol.md has Codex's).
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCode } from '../../src/protocol/index.js';
import { RawClient, RawClientPool, type Frame } from '../helpers/raw-client.js';
import { isCodex, isRelay, startTarget, type Target } from '../helpers/target.js';

let target: Target;
let root: string;
let codexHome: string;
const pool = new RawClientPool();
const previousCodexHome = process.env.CODEX_HOME;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'tether-fs-both-'));
  // tether reads $CODEX_HOME for environmentConfig/read (the Codex helper gives its server its own).
  codexHome = mkdtempSync(join(tmpdir(), 'tether-fs-codex-home-'));
  process.env.CODEX_HOME = codexHome;
  target = await startTarget();
});
afterEach(() => pool.dropAll());
afterAll(async () => {
  await target?.stop();
  if (previousCodexHome === undefined) delete process.env.CODEX_HOME;
  else process.env.CODEX_HOME = previousCodexHome;
  rmSync(root, { recursive: true, force: true });
  rmSync(codexHome, { recursive: true, force: true });
});

async function ready(): Promise<RawClient> {
  const c = await pool.connect(target.url);
  await c.handshake();
  return c;
}

let fixtureCount = 0;
/** A fresh directory for one test. */
function fixture(): { dir: string; path: (rel?: string) => string; uri: (rel?: string) => string } {
  const dir = join(root, `t${++fixtureCount}`);
  mkdirSync(dir);
  const path = (rel = '') => (rel ? join(dir, rel) : dir);
  return { dir, path, uri: (rel = '') => pathToFileURL(path(rel)).href };
}

function expectError(frame: Frame, code: number, message?: string | RegExp): void {
  expect(frame.result, JSON.stringify(frame)).toBeUndefined();
  expect(frame.error, JSON.stringify(frame)).toBeDefined();
  expect(frame.error!.code, JSON.stringify(frame.error)).toBe(code);
  if (typeof message === 'string') expect(frame.error!.message).toBe(message);
  else if (message) expect(frame.error!.message).toMatch(message);
}

function expectResult(frame: Frame): any {
  expect(frame.error, JSON.stringify(frame.error)).toBeUndefined();
  return frame.result;
}

const ENOENT = 'No such file or directory (os error 2)';
const b64 = (s: string | Buffer) => Buffer.from(s).toString('base64');
const walkOptions = (o: object = {}) => ({ maxDepth: 10, maxDirectories: 100, maxEntries: 100, followDirectorySymlinks: false, ...o });

describe('handshake and URIs', () => {
  it('checks the handshake with the family-specific texts', async () => {
    const c = await pool.connect(target.url);
    expectError(await c.call('fs/readFile', { path: 'file:///etc/hostname' }), ErrorCode.InvalidRequest, 'client must call initialize before using filesystem methods');
    expectError(await c.call('fs/close', { handleId: 'h' }), ErrorCode.InvalidRequest, 'client must call initialize before using filesystem methods');
    expectError(
      await c.call('environmentConfig/read', { cwd: 'file:///tmp', configPaths: [['a']], requirementsPaths: [] }),
      ErrorCode.InvalidRequest,
      'client must call initialize before using environment config methods',
    );
    // Params are checked first: a native path is -32602 before and after the handshake.
    expectError(await c.call('fs/readFile', { path: 'relative' }), ErrorCode.InvalidParams, 'invalid URI: relative URL without a base');
    await c.request('initialize', { clientName: 'fs' });
    expectError(await c.call('fs/getMetadata', { path: 'file:///' }), ErrorCode.InvalidRequest, 'client must send initialized before using filesystem methods');
  });

  it('takes file: URIs only, with Codex’s texts for everything else', async () => {
    const c = await ready();
    const read = (path: string) => c.call('fs/readFile', { path });
    expectError(await read('/etc/hostname'), ErrorCode.InvalidParams, 'invalid URI: relative URL without a base');
    expectError(await read(''), ErrorCode.InvalidParams, 'invalid URI: relative URL without a base');
    expectError(await read('http://x/a'), ErrorCode.InvalidParams, 'unsupported path URI scheme `http`');
    expectError(await read('C:\\x'), ErrorCode.InvalidParams, 'unsupported path URI scheme `c`');
    expectError(await read('file:///etc/hostname?x=1'), ErrorCode.InvalidParams, 'query parameters are not allowed in path URIs');
    expectError(await read('file:///etc/hostname#top'), ErrorCode.InvalidParams, 'fragments are not allowed in path URIs');
    expectError(await read('file://host/etc/passwd'), ErrorCode.InvalidRequest, "'file://host/etc/passwd' is invalid on 'linux'");
    expectError(await read('file:///tmp/a%00b'), ErrorCode.InvalidParams, "'file:///tmp/a%00b' is invalid on 'linux'");
    expectError(await c.call('fs/readFile', { path: 5 }), ErrorCode.InvalidParams);
    expectError(await c.call('fs/readFile', {}), ErrorCode.InvalidParams);
    const hostname = b64(readFileSync('/etc/hostname'));
    // WHATWG parsing on both sides: localhost, missing slashes, dot segments, escapes, spaces around.
    for (const uri of ['file://localhost/etc/hostname', 'file:/etc/hostname', 'FILE:///etc/hostname', 'file:///tmp/../etc/./hostname', 'file:///etc//host%6Eame', ' file:///etc/hostname ']) {
      expect(expectResult(await read(uri)), uri).toEqual({ dataBase64: hostname });
    }
  });

  it('refuses a sandbox it cannot honour with -32602; a null sandbox is no sandbox', async () => {
    const f = fixture();
    writeFileSync(f.path('a'), 'x');
    const c = await ready();
    expect(expectResult(await c.call('fs/readFile', { path: f.uri('a'), sandbox: null }))).toEqual({ dataBase64: b64('x') });
    // Codex: serde says what its sandbox context lacks; tether: it does not sandbox at all (nor
    // does a relay forward one, whatever its upstream).
    expectError(await c.call('fs/readFile', { path: f.uri('a'), sandbox: {} }), ErrorCode.InvalidParams, isCodex && !isRelay ? 'missing field `permissions`' : /tether does not sandbox/);
    expectError(await c.call('fs/writeFile', { path: f.uri('b'), dataBase64: '', sandbox: 'x' }), ErrorCode.InvalidParams);
    expect(existsSync(f.path('b'))).toBe(false);
  });
});

describe('fs/readFile and fs/writeFile', () => {
  it('reads and writes bytes, through links, with OS errors in Codex’s form', async () => {
    const f = fixture();
    const bytes = Buffer.from([0, 1, 2, 250, 255, 10]);
    writeFileSync(f.path('bin'), bytes);
    mkdirSync(f.path('dir'));
    symlinkSync('bin', f.path('link'));
    symlinkSync('nowhere', f.path('dangling'));
    symlinkSync('loop2', f.path('loop1'));
    symlinkSync('loop1', f.path('loop2'));
    execFileSync('mkfifo', [f.path('fifo')]);
    const c = await ready();
    const read = (rel: string) => c.call('fs/readFile', { path: f.uri(rel) });
    expect(expectResult(await read('bin'))).toEqual({ dataBase64: bytes.toString('base64') });
    expect(expectResult(await read('link'))).toEqual({ dataBase64: bytes.toString('base64') });
    expectError(await read('missing'), ErrorCode.NotFound, ENOENT);
    expectError(await read('dangling'), ErrorCode.NotFound, ENOENT);
    expectError(await read('dir'), ErrorCode.InvalidRequest, `path \`${f.path('dir')}\` is not a file`);
    expectError(await read('fifo'), ErrorCode.InvalidRequest, `path \`${f.path('fifo')}\` is not a file`);
    expectError(await c.call('fs/readFile', { path: f.uri('dir') + '/' }), ErrorCode.InvalidRequest, `path \`${f.path('dir')}\` is not a file`);
    expectError(await read('bin/x'), ErrorCode.InternalError, 'Not a directory (os error 20)');
    expectError(await read('loop1'), ErrorCode.InternalError, 'Symbolic link loop (os error 40)');
    expectError(await read('x'.repeat(300)), ErrorCode.InternalError, 'Filename too long (os error 36)');
    expectError(await c.call('fs/readFile', { path: 'file:///dev/zero' }), ErrorCode.InvalidRequest, 'path `/dev/zero` is not a file');

    const write = (rel: string, data: string) => c.call('fs/writeFile', { path: f.uri(rel), dataBase64: data });
    expect(expectResult(await write('new', bytes.toString('base64')))).toEqual({});
    expect(readFileSync(f.path('new'))).toEqual(bytes);
    expect(expectResult(await write('new', b64('shorter')))).toEqual({});
    expect(readFileSync(f.path('new'), 'utf8')).toBe('shorter');
    expect(expectResult(await write('link', b64('via link')))).toEqual({});
    expect(readFileSync(f.path('bin'), 'utf8')).toBe('via link');
    expect(expectResult(await write('empty', ''))).toEqual({});
    expect(readFileSync(f.path('empty'))).toHaveLength(0);
    expectError(await write('nodir/x', b64('x')), ErrorCode.NotFound, ENOENT);
    expectError(await write('dir', ''), ErrorCode.InternalError, 'Is a directory (os error 21)');
    expectError(await c.call('fs/writeFile', { path: f.uri('x') }), ErrorCode.InvalidParams);
  });

  it('refuses malformed base64 with the Rust crate’s texts, writing nothing', async () => {
    const f = fixture();
    const c = await ready();
    const cases: Array<[string, string]> = [
      ['!!', 'Invalid symbol 33, offset 0.'],
      ['aGk', 'Invalid padding'],
      ['aGk==', 'Invalid symbol 61, offset 3.'],
      ['aG=k', 'Invalid symbol 61, offset 2.'],
      ['a', 'Invalid input length: 1'],
      ['aGkxQ', 'Invalid input length: 5'],
      ['aGkxQQ=', 'Invalid padding'],
      ['====', 'Invalid symbol 61, offset 0.'],
      ['aGl=', 'Invalid last symbol 108, offset 2.'],
      ['aGk=aGk=', 'Invalid symbol 61, offset 3.'],
      ['aGk=\n', 'Invalid symbol 10, offset 4.'],
      ['aGk-', 'Invalid symbol 45, offset 3.'],
      ['QUJDRA==QQ==', 'Invalid symbol 61, offset 6.'],
    ];
    for (const [data, message] of cases) {
      expectError(await c.call('fs/writeFile', { path: f.uri('out'), dataBase64: data }), ErrorCode.InvalidRequest, `fs/writeFile requires valid base64 dataBase64: ${message}`);
    }
    expect(existsSync(f.path('out'))).toBe(false);
  });
});

describe('fs/createDirectory, fs/remove, fs/copy', () => {
  it('creates directories, recursive by default', async () => {
    const f = fixture();
    writeFileSync(f.path('file'), '');
    const c = await ready();
    const mkdir = (rel: string, extra: object = {}) => c.call('fs/createDirectory', { path: f.uri(rel), ...extra });
    expect(expectResult(await mkdir('a/b/c'))).toEqual({});
    expect(statSync(f.path('a/b/c')).isDirectory()).toBe(true);
    expect(expectResult(await mkdir('a/b/c'))).toEqual({});
    expect(expectResult(await mkdir('a/b/c', { recursive: null }))).toEqual({});
    expectError(await mkdir('a/b/c', { recursive: false }), ErrorCode.InternalError, 'File exists (os error 17)');
    expectError(await mkdir('x/y', { recursive: false }), ErrorCode.NotFound, ENOENT);
    expectError(await mkdir('file'), ErrorCode.InternalError, 'File exists (os error 17)');
    expectError(await mkdir('file/x'), ErrorCode.InternalError, 'Not a directory (os error 20)');
    expect(expectResult(await mkdir('single', { recursive: false }))).toEqual({});
  });

  it('removes files, links and trees; recursive and force by default', async () => {
    const f = fixture();
    mkdirSync(f.path('tree/in'), { recursive: true });
    writeFileSync(f.path('tree/in/x'), 'x');
    mkdirSync(f.path('empty'));
    writeFileSync(f.path('file'), '');
    symlinkSync('tree', f.path('dirlink'));
    symlinkSync('nowhere', f.path('dangling'));
    const c = await ready();
    const rm = (rel: string, extra: object = {}) => c.call('fs/remove', { path: f.uri(rel), ...extra });
    expect(expectResult(await rm('missing'))).toEqual({});
    expectError(await rm('missing', { force: false }), ErrorCode.NotFound, ENOENT);
    expectError(await rm('nodir/x', { force: false }), ErrorCode.NotFound, ENOENT);
    expectError(await rm('file/x'), ErrorCode.InternalError, 'Not a directory (os error 20)');
    expectError(await rm('tree', { recursive: false }), ErrorCode.InternalError, 'Directory not empty (os error 39)');
    expect(expectResult(await rm('empty', { recursive: false }))).toEqual({});
    expect(expectResult(await rm('dirlink'))).toEqual({});
    expect(existsSync(f.path('tree/in/x'))).toBe(true); // the link went, not its target
    expect(expectResult(await rm('dangling', { recursive: false, force: false }))).toEqual({});
    expect(expectResult(await rm('tree'))).toEqual({});
    expect(expectResult(await rm('file', { recursive: false, force: false }))).toEqual({});
    expect(execFileSync('ls', ['-A', f.dir]).toString()).toBe('');
  });

  it('copies files, links and trees with Codex’s rules and texts', async () => {
    const f = fixture();
    mkdirSync(f.path('tree/in'), { recursive: true });
    writeFileSync(f.path('tree/in/y'), 'y');
    writeFileSync(f.path('tree/x'), 'x');
    symlinkSync('../f', f.path('tree/rel'));
    writeFileSync(f.path('f'), 'content');
    chmodSync(f.path('f'), 0o751);
    symlinkSync('tree', f.path('dirlink'));
    symlinkSync('nowhere', f.path('dangling'));
    execFileSync('mkfifo', [f.path('fifo')]);
    const c = await ready();
    const cp = (from: string, to: string, recursive: unknown = false) => c.call('fs/copy', { sourcePath: f.uri(from), destinationPath: f.uri(to), recursive });
    expectError(await c.call('fs/copy', { sourcePath: f.uri('f'), destinationPath: f.uri('g') }), ErrorCode.InvalidParams);
    expect(expectResult(await cp('f', 'g'))).toEqual({});
    expect(readFileSync(f.path('g'), 'utf8')).toBe('content');
    expect(statSync(f.path('g')).mode & 0o777).toBe(0o751);
    writeFileSync(f.path('g'), 'old and longer');
    expect(expectResult(await cp('f', 'g'))).toEqual({});
    expect(readFileSync(f.path('g'), 'utf8')).toBe('content');
    expectError(await cp('missing', 'm2'), ErrorCode.NotFound, ENOENT);
    expectError(await cp('f', 'nodir/x'), ErrorCode.NotFound, ENOENT);
    expectError(await cp('f', 'tree'), ErrorCode.InternalError, 'Is a directory (os error 21)');
    expectError(await cp('tree', 'tree2'), ErrorCode.InvalidRequest, 'fs/copy requires recursive: true when sourcePath is a directory');
    expectError(await cp('tree', 'tree/sub', true), ErrorCode.InvalidRequest, 'fs/copy cannot copy a directory to itself or one of its descendants');
    expectError(await cp('tree', 'tree', true), ErrorCode.InvalidRequest, 'fs/copy cannot copy a directory to itself or one of its descendants');
    expectError(await cp('fifo', 'fifo2'), ErrorCode.InvalidRequest, 'fs/copy only supports regular files, directories, and symlinks');
    expect(expectResult(await cp('tree', 'tree2', true))).toEqual({});
    expect(readFileSync(f.path('tree2/in/y'), 'utf8')).toBe('y');
    expect(readlinkSync(f.path('tree2/rel'))).toBe('../f'); // links are copied as links
    // Merging into an existing tree stops at the first link that exists there.
    expectError(await cp('tree', 'tree2', true), ErrorCode.InternalError, 'File exists (os error 17)');
    expectError(await cp('tree', 'f', true), ErrorCode.InternalError, 'File exists (os error 17)');
    expect(expectResult(await cp('dirlink', 'dirlink2'))).toEqual({});
    expect(lstatSync(f.path('dirlink2')).isSymbolicLink()).toBe(true);
    expect(expectResult(await cp('dangling', 'dangling2'))).toEqual({});
    expectError(await cp('dangling', 'dangling2'), ErrorCode.InternalError, 'File exists (os error 17)');
    // A file copied onto itself: both answer success; Codex empties it, tether leaves it intact.
    expect(expectResult(await cp('f', 'f'))).toEqual({});
    if (!isCodex) expect(readFileSync(f.path('f'), 'utf8')).toBe('content');
  });
});

describe('fs/getMetadata, fs/readDirectory, fs/canonicalize', () => {
  it('describes what is at a path, following links', async () => {
    const f = fixture();
    writeFileSync(f.path('file'), 'hello');
    mkdirSync(f.path('dir'));
    symlinkSync('file', f.path('link'));
    symlinkSync('dir', f.path('dirlink'));
    symlinkSync('nowhere', f.path('dangling'));
    execFileSync('mkfifo', [f.path('fifo')]);
    const c = await ready();
    const meta = (rel: string) => c.call('fs/getMetadata', { path: f.uri(rel) });
    const modified = (rel: string) => Number(statSync(f.path(rel), { bigint: true }).mtimeNs / 1_000_000n);
    const file = expectResult(await meta('file'));
    expect(file).toEqual({ isDirectory: false, isFile: true, isSymlink: false, size: 5, createdAtMs: expect.any(Number), modifiedAtMs: modified('file') });
    // Codex's musl build cannot read birth times and says 0; tether reports the real one.
    const birth = Number(statSync(f.path('file'), { bigint: true }).birthtimeNs / 1_000_000n);
    expect(file.createdAtMs).toBe(isCodex ? 0 : birth);
    expect(expectResult(await meta('dir'))).toMatchObject({ isDirectory: true, isFile: false, isSymlink: false, size: statSync(f.path('dir')).size });
    expect(expectResult(await meta('link'))).toMatchObject({ isDirectory: false, isFile: true, isSymlink: true, size: 5 });
    expect(expectResult(await meta('dirlink'))).toMatchObject({ isDirectory: true, isFile: false, isSymlink: true });
    expect(expectResult(await meta('fifo'))).toMatchObject({ isDirectory: false, isFile: false, isSymlink: false, size: 0 });
    expectError(await meta('dangling'), ErrorCode.NotFound, ENOENT);
    expectError(await meta('missing'), ErrorCode.NotFound, ENOENT);
    expectError(await meta('file/x'), ErrorCode.InternalError, 'Not a directory (os error 20)');
  });

  it('lists a directory with links followed and unreadable entries left out', async () => {
    const f = fixture();
    writeFileSync(f.path('file'), '');
    mkdirSync(f.path('dir'));
    symlinkSync('file', f.path('link'));
    symlinkSync('dir', f.path('dirlink'));
    symlinkSync('nowhere', f.path('dangling'));
    execFileSync('mkfifo', [f.path('fifo')]);
    writeFileSync(f.path('é €'), '');
    const c = await ready();
    const { entries } = expectResult(await c.call('fs/readDirectory', { path: f.uri() }));
    // The order is the directory's own on both servers; compare as sets.
    const sorted = [...entries].sort((a: any, b: any) => (a.fileName < b.fileName ? -1 : 1));
    expect(sorted).toEqual([
      { fileName: 'dir', isDirectory: true, isFile: false },
      { fileName: 'dirlink', isDirectory: true, isFile: false },
      { fileName: 'fifo', isDirectory: false, isFile: false },
      { fileName: 'file', isDirectory: false, isFile: true },
      { fileName: 'link', isDirectory: false, isFile: true },
      { fileName: 'é €', isDirectory: false, isFile: true },
    ]);
    expect(expectResult(await c.call('fs/readDirectory', { path: f.uri('dir') }))).toEqual({ entries: [] });
    expectError(await c.call('fs/readDirectory', { path: f.uri('file') }), ErrorCode.InternalError, 'Not a directory (os error 20)');
    expectError(await c.call('fs/readDirectory', { path: f.uri('missing') }), ErrorCode.NotFound, ENOENT);
  });

  it('canonicalizes to a URI escaped the way rust-url escapes paths', async () => {
    const f = fixture();
    let odd = 'é\u0001\u007f';
    for (let code = 0x20; code < 0x7f; code++) if (code !== 0x2f) odd += String.fromCharCode(code);
    writeFileSync(f.path(odd), '');
    symlinkSync(odd, f.path('link'));
    mkdirSync(f.path('sub'));
    const c = await ready();
    const escaped = "%C3%A9%01%7F%20!%22%23$%25&'()*+,-.0123456789:;%3C=%3E%3F@ABCDEFGHIJKLMNOPQRSTUVWXYZ[%5C]^_%60abcdefghijklmnopqrstuvwxyz%7B|%7D~";
    expect(expectResult(await c.call('fs/canonicalize', { path: f.uri('link') }))).toEqual({ path: `file://${f.dir}/${escaped}` });
    expect(expectResult(await c.call('fs/canonicalize', { path: `${f.uri('sub')}/../link` }))).toEqual({ path: `file://${f.dir}/${escaped}` });
    expectError(await c.call('fs/canonicalize', { path: f.uri('missing') }), ErrorCode.NotFound, ENOENT);
  });
});

describe('fs/walk', () => {
  function tree(): ReturnType<typeof fixture> {
    const f = fixture();
    mkdirSync(f.path('z'));
    mkdirSync(f.path('e'));
    for (const p of ['z/3', 'z/1', 'z/2', 'q', 'b', 'm', 'a', 'k']) writeFileSync(f.path(p), p);
    symlinkSync('z', f.path('a_link'));
    symlinkSync('.', f.path('z/up'));
    symlinkSync('a', f.path('file_link'));
    execFileSync('mkfifo', [f.path('fifo')]);
    return f;
  }
  const listed = (result: any, f: ReturnType<typeof fixture>) =>
    result.entries.map((e: any) => `${e.path.slice(f.uri().length + 1)}:${e.kind[0]}`).join(' ');

  it('walks breadth first in byte order, counting every entry and directory as Codex does', async () => {
    const f = tree();
    const c = await ready();
    const walk = async (options: object) => expectResult(await c.call('fs/walk', { path: f.uri(), options: walkOptions(options) }));
    const all = await walk({});
    expect(listed(all, f)).toBe('a:f b:f e:d k:f m:f q:f z:d z/1:f z/2:f z/3:f');
    expect(all).toMatchObject({ errors: [], truncated: false });
    // 14 entries are looked at (links and the FIFO count, listed or not).
    expect(await walk({ maxEntries: 14 })).toMatchObject({ truncated: false });
    const at13 = await walk({ maxEntries: 13 });
    expect(listed(at13, f)).toBe('a:f b:f e:d k:f m:f q:f z:d z/1:f z/2:f z/3:f');
    expect(at13.truncated).toBe(true);
    const at2 = await walk({ maxEntries: 2 });
    expect([listed(at2, f), at2.truncated]).toEqual(['a:f', true]);
    expect(listed(await walk({ maxDepth: 0 }), f)).toBe('a:f b:f e:d k:f m:f q:f z:d');
    expect((await walk({ maxDepth: 0, maxDirectories: 1 })).truncated).toBe(false);
    const twoDirs = await walk({ maxDirectories: 2 });
    expect([listed(twoDirs, f), twoDirs.truncated]).toEqual(['a:f b:f e:d k:f m:f q:f z:d', true]);
    expect((await walk({ maxDirectories: 3 })).truncated).toBe(false);
    // Following links: only links to directories, each real directory walked once (first path wins).
    expect(listed(await walk({ followDirectorySymlinks: true }), f)).toBe('a:f a_link:d b:f e:d k:f m:f q:f z:d a_link/1:f a_link/2:f a_link/3:f a_link/up:d');
  });

  it('handles its root, its limits and unreadable directories like Codex', async () => {
    const f = tree();
    const c = await ready();
    const walk = (rel: string, options: object = {}) => c.call('fs/walk', { path: f.uri(rel), options: walkOptions(options) });
    expect(expectResult(await walk('a'))).toEqual({ entries: [], errors: [], truncated: false });
    expect(expectResult(await walk('a_link'))).toEqual({ entries: [], errors: [], truncated: false });
    expect(listed(expectResult(await walk('a_link', { followDirectorySymlinks: true })), { uri: () => f.uri('a_link') } as never)).toBe('1:f 2:f 3:f up:d');
    expectError(await walk('missing'), ErrorCode.NotFound, ENOENT);
    expectError(await walk('', { maxEntries: 0 }), ErrorCode.InvalidRequest, 'filesystem walk limits must be greater than zero');
    expectError(await walk('', { maxDirectories: 0 }), ErrorCode.InvalidRequest, 'filesystem walk limits must be greater than zero');
    const tooMuch = 'filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000';
    expectError(await walk('', { maxDepth: 65 }), ErrorCode.InvalidRequest, tooMuch);
    expectError(await walk('', { maxDirectories: 10_001 }), ErrorCode.InvalidRequest, tooMuch);
    expectError(await walk('', { maxEntries: 50_001 }), ErrorCode.InvalidRequest, tooMuch);
    expect(expectResult(await walk('', { maxDepth: 64, maxDirectories: 10_000, maxEntries: 50_000 })).truncated).toBe(false);
    for (const options of [{ maxDepth: -1 }, { maxDepth: 1.5 }, { maxDepth: null }, { followDirectorySymlinks: null }]) {
      expectError(await walk('', options), ErrorCode.InvalidParams);
    }
    expectError(await c.call('fs/walk', { path: f.uri() }), ErrorCode.InvalidParams);
    expectError(await c.call('fs/walk', { path: f.uri(), options: { maxDepth: 1 } }), ErrorCode.InvalidParams);
  });
});

describe('file handles', () => {
  it('reads blocks at offsets; eof means fewer bytes than asked for', async () => {
    const f = fixture();
    writeFileSync(f.path('f'), 'hello world');
    mkdirSync(f.path('dir'));
    const c = await ready();
    expect(expectResult(await c.call('fs/open', { handleId: 'h1', path: f.uri('f') }))).toEqual({ handleId: 'h1' });
    const read = (offset: number, len: number, handleId = 'h1') => c.call('fs/readBlock', { handleId, offset, len });
    expect(expectResult(await read(0, 5))).toEqual({ chunk: b64('hello'), eof: false });
    expect(expectResult(await read(6, 5))).toEqual({ chunk: b64('world'), eof: false });
    expect(expectResult(await read(6, 100))).toEqual({ chunk: b64('world'), eof: true });
    expect(expectResult(await read(11, 5))).toEqual({ chunk: '', eof: true });
    expect(expectResult(await read(1000, 5))).toEqual({ chunk: '', eof: true });
    expect(expectResult(await read(0, 5))).toEqual({ chunk: b64('hello'), eof: false }); // again: reads resume by offset
    const length = 'file read block length must be between 1 and 1048576';
    expectError(await read(0, 0), ErrorCode.InvalidRequest, length);
    expectError(await read(0, 1048577), ErrorCode.InvalidRequest, length);
    expect(expectResult(await read(0, 1048576))).toEqual({ chunk: b64('hello world'), eof: true });
    expectError(await read(0, 5, 'nope'), ErrorCode.NotFound, 'unknown file handle `nope`');
    expectError(await read(-1, 5), ErrorCode.InvalidParams);
    expectError(await c.call('fs/readBlock', { handleId: 'h1', offset: 0 }), ErrorCode.InvalidParams);
    expectError(await c.call('fs/open', { handleId: 'h1', path: f.uri('f') }), ErrorCode.InvalidRequest, 'file handle `h1` already exists');
    expectError(await c.call('fs/open', { handleId: 'h2', path: f.uri('missing') }), ErrorCode.NotFound, ENOENT);
    expectError(await c.call('fs/open', { handleId: 'h3', path: f.uri('dir') }), ErrorCode.InvalidRequest, `path \`${f.path('dir')}\` is not a file`);
    const tooLong = 'file handle ID must not exceed 32 bytes';
    expectError(await c.call('fs/open', { handleId: 'x'.repeat(33), path: f.uri('f') }), ErrorCode.InvalidRequest, tooLong);
    expectError(await read(0, 1, 'x'.repeat(33)), ErrorCode.InvalidRequest, tooLong);
    expectError(await c.call('fs/close', { handleId: 'é'.repeat(17) }), ErrorCode.InvalidRequest, tooLong);
    expect(expectResult(await c.call('fs/open', { handleId: 'x'.repeat(32), path: f.uri('f') }))).toEqual({ handleId: 'x'.repeat(32) });
    expectError(await c.call('fs/open', { handleId: 'm', path: f.uri('f'), mode: null }), ErrorCode.InvalidParams);
    expect(expectResult(await c.call('fs/open', { handleId: '', path: f.uri('f'), mode: 'read' }))).toEqual({ handleId: '' });
    expectError(await c.call('fs/open', { handleId: 'm', path: f.uri('f'), mode: 'bogus' }), ErrorCode.InvalidParams);
    expect(expectResult(await c.call('fs/close', { handleId: 'h1' }))).toEqual({});
    expect(expectResult(await c.call('fs/close', { handleId: 'h1' }))).toEqual({});
    expect(expectResult(await c.call('fs/close', { handleId: 'never' }))).toEqual({});
    expectError(await read(0, 5), ErrorCode.NotFound, 'unknown file handle `h1`');
  });

  it('writes blocks at offsets into a replaced file', async () => {
    const f = fixture();
    writeFileSync(f.path('f'), 'old content');
    writeFileSync(f.path('r'), 'read only');
    const c = await ready();
    expect(expectResult(await c.call('fs/open', { handleId: 'w', path: f.uri('f'), mode: 'replace' }))).toEqual({ handleId: 'w' });
    expect(readFileSync(f.path('f'), 'utf8')).toBe(''); // replaced at open
    const write = (offset: number, chunk: string, handleId = 'w') => c.call('fs/writeBlock', { handleId, offset, chunk });
    expect(expectResult(await write(0, b64('ABC')))).toEqual({});
    expect(expectResult(await write(5, b64('XYZ')))).toEqual({});
    expect(expectResult(await write(3, b64('DEF')))).toEqual({});
    expect(expectResult(await write(6, b64('GH')))).toEqual({});
    expect(expectResult(await write(6, b64('GH')))).toEqual({}); // a re-sent block writes the same bytes again
    expect(readFileSync(f.path('f'), 'utf8')).toBe('ABCDEFGH');
    expectError(await write(6, ''), ErrorCode.InvalidRequest, 'file write block length must be between 1 and 1048576');
    expectError(await write(0, b64(Buffer.alloc(1048577))), ErrorCode.InvalidRequest, 'file write block length must be between 1 and 1048576');
    expectError(await write(8, '!!'), ErrorCode.InvalidParams, 'Invalid symbol 33, offset 0.');
    expectError(await write(8, 'QQ'), ErrorCode.InvalidParams, 'Invalid padding');
    expectError(await write(0, b64('x'), 'nope'), ErrorCode.NotFound, 'unknown file handle `nope`');
    expectError(await c.call('fs/readBlock', { handleId: 'w', offset: 0, len: 5 }), ErrorCode.InternalError, 'Bad file descriptor (os error 9)');
    expect(expectResult(await c.call('fs/open', { handleId: 'r', path: f.uri('r') }))).toEqual({ handleId: 'r' });
    expectError(await write(0, b64('x'), 'r'), ErrorCode.InternalError, 'Bad file descriptor (os error 9)');
    expect(expectResult(await c.call('fs/open', { handleId: 'n', path: f.uri('new'), mode: 'replace' }))).toEqual({ handleId: 'n' });
    expect(existsSync(f.path('new'))).toBe(true);
    expectError(await c.call('fs/open', { handleId: 'n2', path: f.uri('nodir/new'), mode: 'replace' }), ErrorCode.NotFound, ENOENT);
    for (const id of ['w', 'r', 'n']) expect(expectResult(await c.call('fs/close', { handleId: id }))).toEqual({});
    expect(readFileSync(f.path('f'), 'utf8')).toBe('ABCDEFGH');
  });

  it('allows 128 open handles per connection and loses them with the connection (Codex’s rule without fsResume)', async () => {
    const f = fixture();
    writeFileSync(f.path('f'), 'x');
    const c = await pool.connect(target.url);
    const { sessionId } = await c.handshake();
    for (let i = 0; i < 128; i++) expectResult(await c.call('fs/open', { handleId: `h${i}`, path: f.uri('f') }));
    expectError(await c.call('fs/open', { handleId: 'h128', path: f.uri('f') }), ErrorCode.InvalidRequest, 'at most 128 file handles may be open per connection');
    expectResult(await c.call('fs/close', { handleId: 'h0' }));
    expectResult(await c.call('fs/open', { handleId: 'h128', path: f.uri('f') }));
    await c.drop();
    const again = await pool.connect(target.url);
    await again.handshake('fs', sessionId);
    expectError(await again.call('fs/readBlock', { handleId: 'h1', offset: 0, len: 1 }), ErrorCode.NotFound, 'unknown file handle `h1`');
    expectResult(await again.call('fs/open', { handleId: 'h1', path: f.uri('f') }));
  });
});

describe('fs/watchMissing', () => {
  /** The next fs/missingChanged for `watchId` (already received counts). */
  const changed = (c: RawClient, watchId: number) =>
    c.waitFor((n) => n.method === 'fs/missingChanged' && n.params?.watchId === watchId, 10_000, true);
  const notified = (c: RawClient) => c.notifications.filter((n) => n.method === 'fs/missingChanged').map((n) => n.params);

  it('tells once when a missing path, or a directory on the way to it, appears', async () => {
    const f = fixture();
    const c = await ready();
    expect(expectResult(await c.call('fs/watchMissing', { watchId: 1, missing: [f.uri('a'), f.uri('b/c')], present: null }))).toEqual({ watching: true });
    writeFileSync(f.path('a'), '');
    expect((await changed(c, 1)).params).toEqual({ watchId: 1 });
    expect(expectResult(await c.call('fs/watchMissing', { watchId: 2, missing: [f.uri('deep/er/z')] }))).toEqual({ watching: true });
    mkdirSync(f.path('deep'));
    await changed(c, 2);
    expect(notified(c)).toEqual([{ watchId: 1 }, { watchId: 2 }]);
  });

  it('tells when the present path goes; answers false when there is nothing to wait for', async () => {
    const f = fixture();
    writeFileSync(f.path('exists'), '');
    const c = await ready();
    const watch = (watchId: number, missing: string[], present?: string | null) => c.call('fs/watchMissing', present === undefined ? { watchId, missing } : { watchId, missing, present });
    expect(expectResult(await watch(10, [f.uri('exists')]))).toEqual({ watching: false });
    expect(expectResult(await watch(11, []))).toEqual({ watching: false });
    expect(expectResult(await watch(12, [f.uri('m')], 'file:///no/such/present'))).toEqual({ watching: false });
    expect(expectResult(await watch(13, [f.uri('m')], f.uri('exists')))).toEqual({ watching: true });
    rmSync(f.path('exists'));
    await changed(c, 13);
    expectError(await watch(14, ['/abs']), ErrorCode.InvalidParams, 'invalid URI: relative URL without a base');
    expectError(await c.call('fs/watchMissing', { watchId: -1, missing: [] }), ErrorCode.InvalidParams);
    expectError(await c.call('fs/watchMissing', { watchId: 15, missing: [f.uri('m')], present: [f.uri('m')] }), ErrorCode.InvalidParams);
    expectError(await c.call('fs/watchMissing', { watchId: 16 }), ErrorCode.InvalidParams);
  });

  it('keeps one watch per connection: a new id replaces it, a used id changes nothing', async () => {
    const f = fixture();
    const c = await ready();
    const watch = (watchId: number, rel: string) => c.call('fs/watchMissing', { watchId, missing: [f.uri(rel)], present: null });
    expect(expectResult(await watch(20, 'a'))).toEqual({ watching: true });
    expect(expectResult(await watch(21, 'b'))).toEqual({ watching: true });
    expect(expectResult(await watch(21, 'c'))).toEqual({ watching: false }); // used: watch 21 stays on b
    writeFileSync(f.path('a'), ''); // watch 20 was replaced: nothing
    writeFileSync(f.path('c'), '');
    writeFileSync(f.path('b'), '');
    await changed(c, 21);
    expect(notified(c)).toEqual([{ watchId: 21 }]);
    expect(expectResult(await watch(20, 'd'))).toEqual({ watching: false }); // ids are never reused on a connection
    // A watch that answers false still replaces the one before it.
    expect(expectResult(await watch(22, 'e'))).toEqual({ watching: true });
    expect(expectResult(await watch(23, 'a'))).toEqual({ watching: false });
    writeFileSync(f.path('e'), '');
    expect(expectResult(await watch(24, 'f'))).toEqual({ watching: true });
    writeFileSync(f.path('f'), '');
    await changed(c, 24);
    expect(notified(c)).toEqual([{ watchId: 21 }, { watchId: 24 }]);
  });
});

describe('environmentConfig/read', () => {
  it('answers the host’s Codex config reduced to the requested paths, in document order', async () => {
    const c = await ready();
    const read = (configPaths: string[][], requirementsPaths: string[][] = [['mcp_servers']]) =>
      c.call('environmentConfig/read', { cwd: 'file:///tmp', configPaths, requirementsPaths });
    const empty = expectResult(await read([['mcp_servers']]));
    const home = empty.codexHomeDir as string;
    expect(empty).toEqual({
      userHomeDir: pathToFileURL(process.env.HOME ?? '/root').href,
      codexHomeDir: home,
      hostname: execFileSync('hostname').toString().trim(),
      config: { layers: [], cloudInsertionIndex: 0 },
      requirements: { layers: [], cloudInsertionIndex: 0 },
    });
    const dir = new URL(home).pathname;
    writeFileSync(
      join(dir, 'config.toml'),
      'model = "m"\n# a comment\n[mcp_servers.a]\ncommand = "x"\nargs = ["1", "2"]\nenv = { K = "v" }\n[mcp_servers.b]\ncommand = "y"\nenabled = true\nstartup_timeout_sec = 2.5\n[other]\nx = 1\ny = 2\n',
    );
    try {
      const layer = (toml: string) => ({ config: { layers: [{ source: `user (${join(dir, 'config.toml')})`, baseDir: home, toml }], cloudInsertionIndex: 0 } });
      const servers = '[mcp_servers.a]\ncommand = "x"\nargs = ["1", "2"]\n\n[mcp_servers.a.env]\nK = "v"\n\n[mcp_servers.b]\ncommand = "y"\nenabled = true\nstartup_timeout_sec = 2.5\n';
      expect(expectResult(await read([['mcp_servers']]))).toMatchObject(layer(servers));
      expect(expectResult(await read([['mcp_servers'], ['model']]))).toMatchObject(layer(`model = "m"\n\n${servers}`));
      expect(expectResult(await read([['other', 'x']]))).toMatchObject(layer('[other]\nx = 1\n'));
      expect(expectResult(await read([['nothing']]))).toMatchObject({ config: { layers: [] } });
      expect(expectResult(await read([], [['mcp_servers']]))).toMatchObject({ config: { layers: [] }, requirements: { layers: [] } });
    } finally {
      rmSync(join(dir, 'config.toml'));
    }
    expectError(await read([], []), ErrorCode.InvalidParams, 'at least one config or requirements path is required');
    expectError(await read([['a'], []]), ErrorCode.InvalidParams, 'TOML paths must contain at least one key segment');
    expectError(await c.call('environmentConfig/read', { cwd: 'file:///tmp', configPaths: [['a']] }), ErrorCode.InvalidParams);
    expectError(await c.call('environmentConfig/read', { cwd: 'relative', configPaths: [['a']], requirementsPaths: [] }), ErrorCode.InvalidParams, 'invalid URI: relative URL without a base');
  });
});
