/**
 * Session records and idempotency-key journals in the state dir (issue #27):
 * src/server/restart/session-store.ts and src/server/restart/key-journal.ts. Atomic, serialized, coalesced
 * record writes; loading that skips bad files; the key journal's unknown outcomes, corrupt
 * lines and compaction.
 */
import * as fsp from 'node:fs/promises';
import { appendFileSync, mkdirSync, mkdtempSync, truncateSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { decodeWatch, encodeWatch } from '../../../../src/server/fs/kept-fs.js';
import { nativePath } from '../../../../src/server/fs/uri.js';
import { KeyJournal, MAX_JOURNAL_BYTES } from '../../../../src/server/restart/key-journal.js';
import { MAX_RECORD_BYTES, SessionStore, type SessionRecord } from '../../../../src/server/restart/session-store.js';
import type { LogLevel } from '../../../../src/util/logger.js';

vi.mock('node:fs/promises', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:fs/promises')>();
  return { ...real, rename: vi.fn(real.rename) };
});

const record = (id: string, over: Partial<SessionRecord> = {}): SessionRecord => ({
  version: 1,
  id,
  credential: 'ab'.repeat(32),
  extensions: ['acks', 'binaryOutput'],
  limits: {
    ttlMs: 30_000,
    resumeGraceMs: 2_000,
    closedRetentionMs: 30_000,
    maxProcesses: 1024,
    output: { windowBytes: 8, retentionBytes: 1, readAheadBytes: 1, maxChunkBytes: 2, readCapBytes: 8 },
  },
  nextHandle: 3,
  processes: [{ processId: 'p1', handle: 1, socket: 'abcdefghijk2.sock', tty: false, argv: ['sh', '-c', 'x'], startedAt: 5 }],
  createdAt: 1,
  ...over,
});

let dir = '';
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'tss-'));
  vi.mocked(fsp.rename).mockClear();
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('SessionStore', () => {
  const quiet = () => {
    const lines: string[] = [];
    return { lines, logger: (_l: LogLevel, m: string) => void lines.push(m) };
  };

  it('writes a record atomically with mode 0600 and loads it back', async () => {
    const store = new SessionStore(dir, quiet().logger);
    await store.save(record('s1'));
    expect(statSync(join(dir, 's1.json')).mode & 0o777).toBe(0o600);
    expect(readdirSync(dir)).toEqual(['s1.json']);
    expect(await store.loadAll()).toEqual([record('s1')]);
  });

  it('coalesces the changes of one tick into one write of the newest record', async () => {
    const store = new SessionStore(dir, quiet().logger);
    const saves = [1, 2, 3, 4].map((n) => store.save(record('s1', { nextHandle: n })));
    await Promise.all(saves);
    expect(vi.mocked(fsp.rename)).toHaveBeenCalledTimes(1);
    expect((await store.loadAll())[0]!.nextHandle).toBe(4);
  });

  it('serializes writes of one session: a change during a write is written after it, never racing', async () => {
    const store = new SessionStore(dir, quiet().logger);
    let inFlight = 0;
    let most = 0;
    const real = vi.mocked(fsp.rename).getMockImplementation()!;
    vi.mocked(fsp.rename).mockImplementation(async (a, b) => {
      most = Math.max(most, ++inFlight);
      try {
        return await real(a, b);
      } finally {
        inFlight--;
      }
    });
    const first = store.save(record('s1', { nextHandle: 1 }));
    // Each save lands while the previous write is running (after the tick that starts it).
    await new Promise((r) => setImmediate(r));
    const second = store.save(record('s1', { nextHandle: 2 }));
    const third = store.save(record('s1', { nextHandle: 3 }));
    await Promise.all([first, second, third]);
    vi.mocked(fsp.rename).mockImplementation(real);
    expect(most).toBe(1);
    expect(vi.mocked(fsp.rename)).toHaveBeenCalledTimes(2);
    expect((await store.loadAll())[0]!.nextHandle).toBe(3);
  });

  it('a remove after a save wins, and takes the key journal with it', async () => {
    const store = new SessionStore(dir, quiet().logger);
    await store.save(record('s1'));
    writeFileSync(join(dir, 's1.keys'), '');
    void store.save(record('s1', { nextHandle: 9 }));
    await store.remove('s1');
    await store.flush();
    expect(readdirSync(dir)).toEqual([]);
  });

  it('skips corrupt, foreign and symlinked files with a log line, and removes leftover temporaries', async () => {
    const { lines, logger } = quiet();
    const store = new SessionStore(dir, logger);
    await store.save(record('good'));
    writeFileSync(join(dir, 'torn.json'), '{"version":1,"id":"to');
    writeFileSync(join(dir, 'foreign.json'), JSON.stringify({ hello: 'world' }));
    writeFileSync(join(dir, 'renamed.json'), JSON.stringify(record('other')));
    writeFileSync(join(dir, 'badproc.json'), JSON.stringify(record('badproc', { processes: [{ processId: 'p' } as never] })));
    symlinkSync(join(dir, 'good.json'), join(dir, 'link.json'));
    writeFileSync(join(dir, 'x.json.tmp-1-aa'), 'half');
    writeFileSync(join(dir, 'notes.txt'), 'not a record');
    expect((await store.loadAll()).map((r) => r.id)).toEqual(['good']);
    expect(lines).toHaveLength(5);
    expect(lines.join('\n')).toContain('session record torn.json not restored');
    expect(lines.join('\n')).toContain('renamed.json not restored (it names session other)');
    expect(lines.join('\n')).toContain('link.json not restored (a symbolic link)');
    expect(readdirSync(dir)).not.toContain('x.json.tmp-1-aa');
  });

  it('sets a bad record aside (one log line naming where) and keeps the good ones, whatever the bad one says', async () => {
    const { lines, logger } = quiet();
    const aside = mkdtempSync(join(tmpdir(), 'tss-q-'));
    const moved: string[] = [];
    const store = new SessionStore(dir, logger, async (path) => {
      const to = join(aside, path.slice(dir.length + 1));
      await fsp.rename(path, to);
      moved.push(to);
      return to;
    });
    try {
      await store.save(record('good'));
      const output = record('x').limits.output;
      const bad: Record<string, unknown> = {
        // A 0 where a positive size belongs: a successor would loop on a zero chunk forever.
        zerochunk: record('zerochunk', { limits: { ...record('x').limits, output: { ...output, maxChunkBytes: 0 } } }),
        zerowindow: record('zerowindow', { limits: { ...record('x').limits, output: { ...output, windowBytes: 0 } } }),
        hugecap: record('hugecap', { limits: { ...record('x').limits, output: { ...output, readCapBytes: 2 ** 60 } } }),
        newer: { ...record('newer'), version: 2 },
        older: { ...record('older'), version: 0 },
      };
      for (const [id, r] of Object.entries(bad)) writeFileSync(join(dir, `${id}.json`), JSON.stringify(r));
      // Over the size bound: refused before it is read (here, only just over it).
      writeFileSync(join(dir, 'big.json'), Buffer.alloc(MAX_RECORD_BYTES + 1, 0x20));
      expect((await store.loadAll()).map((r) => r.id)).toEqual(['good']);
      expect(readdirSync(dir)).toEqual(['good.json']);
      expect(moved.map((p) => p.slice(aside.length + 1)).sort()).toEqual(['big.json', 'hugecap.json', 'newer.json', 'older.json', 'zerochunk.json', 'zerowindow.json']);
      expect(lines).toHaveLength(6);
      const text = lines.join('\n');
      expect(text).toContain('zerochunk.json not restored (not a tether session record (limits.output.maxChunkBytes 0');
      expect(text).toContain('newer.json not restored (not a tether session record (version 2: this server reads version 1 (written by a newer tether)');
      expect(text).toContain(`big.json not restored (${MAX_RECORD_BYTES + 1} bytes, over the ${MAX_RECORD_BYTES}`);
      expect(text).toContain(`set aside as ${aside}/big.json`);
    } finally {
      rmSync(aside, { recursive: true, force: true });
    }
  });

  it('refuses to save a record over the size bound: an error (logged, counted), the old record kept', async () => {
    const { lines, logger } = quiet();
    const store = new SessionStore(dir, logger);
    await store.save(record('s1'));
    const huge = record('s1', { processes: [{ ...record('s1').processes[0]!, processId: 'p'.repeat(MAX_RECORD_BYTES) }] });
    await expect(store.save(huge)).rejects.toThrow(/over 4194304 bytes/);
    expect(store.failures).toBe(1);
    expect(lines.join('\n')).toContain('could not save session record s1');
    expect(await store.loadAll()).toEqual([record('s1')]);
  });

  it('keeps the processes a restart lost (id → reason), and skips a record whose lost list is malformed', async () => {
    const { lines, logger } = quiet();
    const store = new SessionStore(dir, logger);
    await store.save(record('s1', { lost: { p0: 'the process was lost in the server restart (its keeper was gone)' } }));
    writeFileSync(join(dir, 'badlost.json'), JSON.stringify(record('badlost', { lost: { p0: 5 } as never })));
    expect(await store.loadAll()).toEqual([record('s1', { lost: { p0: 'the process was lost in the server restart (its keeper was gone)' } })]);
    expect(lines.join('\n')).toContain('(lost)');
  });

  it("keeps an fsResume session's watch (paths as base64 bytes) and handle ids, and skips a record whose fs part is malformed", async () => {
    const { lines, logger } = quiet();
    const store = new SessionStore(dir, logger);
    const path = nativePath(Buffer.from([0x2f, 0x74, 0xff, 0x0a])); // "/t", a byte that is not UTF-8, a newline
    const fs = { watch: encodeWatch({ watchId: 7, missing: [path], present: null }), handles: ['h1'] };
    await store.save(record('s1', { fs }));
    writeFileSync(join(dir, 'badfs.json'), JSON.stringify(record('badfs', { fs: { watch: { watchId: 1, missing: ['not base64!'], present: null } } })));
    const [loaded] = await store.loadAll();
    expect(loaded).toEqual(record('s1', { fs }));
    expect(decodeWatch(loaded!.fs!.watch!).missing[0]!.bytes).toEqual(path.bytes);
    expect(lines.join('\n')).toContain('(fs.watch)');
  });

  it("keeps a process's keepLastBytes (--keep-last); a record without it (an older server's) reads as before; a bad one is set aside", async () => {
    const { lines, logger } = quiet();
    const store = new SessionStore(dir, logger);
    const p1 = record('x').processes[0]!;
    const kept = record('kl', { processes: [{ ...p1, keepLastBytes: 512 * 1024 }, { ...p1, processId: 'p2', socket: 'abcdefghijk3.sock' }] });
    await store.save(kept);
    // As an older server wrote it: no member at all.
    writeFileSync(join(dir, 'old.json'), JSON.stringify(record('old')));
    expect(JSON.parse(readFileSync(join(dir, 'old.json'), 'utf8')).processes[0]).not.toHaveProperty('keepLastBytes');
    const bad = { zero: 0, negative: -1, fraction: 1.5, text: '512', huge: 2 ** 53, nul: null };
    for (const [id, value] of Object.entries(bad)) {
      writeFileSync(join(dir, `bad${id}.json`), JSON.stringify(record(`bad${id}`, { processes: [{ ...p1, keepLastBytes: value as never }] })));
    }
    const loaded = await store.loadAll();
    expect(loaded.map((r) => r.id)).toEqual(['kl', 'old']);
    expect(loaded[0]).toEqual(kept);
    expect(loaded[0]!.processes.map((p) => p.keepLastBytes)).toEqual([512 * 1024, undefined]);
    expect(loaded[1]).toEqual(record('old'));
    expect(loaded[1]!.processes[0]!.keepLastBytes).toBeUndefined();
    // Each bad one costs its own session, with one line naming what is wrong.
    expect(lines).toHaveLength(Object.keys(bad).length);
    expect(lines.join('\n')).toContain('badzero.json not restored (not a tether session record (process "p1" keepLastBytes 0: a size of 1 to 9007199254740991 bytes');
    expect(lines.join('\n')).toContain('badtext.json not restored (not a tether session record (process "p1" keepLastBytes "512"');
    expect(lines.join('\n')).toContain('badnul.json not restored');
  });

  it('refuses an id that is not a safe file name', async () => {
    const store = new SessionStore(dir, quiet().logger);
    await expect(store.save(record('../evil'))).rejects.toThrow('cannot be stored');
  });
});

describe('KeyJournal', () => {
  it('sets aside a journal over its bound or not a regular file (one log line), never reading it, and starts a new one', () => {
    const lines: string[] = [];
    const log = (_l: LogLevel, m: string) => void lines.push(m);
    const path = join(dir, 'big.keys');
    writeFileSync(path, '');
    truncateSync(path, MAX_JOURNAL_BYTES + 1); // sparse: nothing of it is in memory or on disk
    const j = new KeyJournal(path, 10, log);
    expect(j.load().size).toBe(0);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`key journal ${path} not read \\(${MAX_JOURNAL_BYTES + 1} bytes, over ${MAX_JOURNAL_BYTES}\\): set aside as ${path}\\.set-aside-\\d+`));
    j.started('a');
    j.close();
    expect([...new KeyJournal(path, 10).load()]).toEqual([['a', { state: 'unknown', fingerprint: null }]]);
    const d = join(dir, 'dir.keys');
    mkdirSync(d);
    expect(new KeyJournal(d, 10, log).load().size).toBe(0);
    expect(lines[1]).toMatch(/dir\.keys not read \(not a regular file\)/);
  });

  it('loads answered keys and a started-but-unanswered one as unknown', () => {
    const path = join(dir, 's.keys');
    const j = new KeyJournal(path, 10);
    j.started('a', 'fa');
    j.answered('a', { result: {} });
    j.started('b');
    j.close();
    expect([...new KeyJournal(path, 10).load()]).toEqual([
      ['a', { state: 'answered', fingerprint: 'fa', answer: { result: {} } }],
      ['b', { state: 'unknown', fingerprint: null }],
    ]);
    // Every line is on file as soon as the call returns (synchronous appends).
    expect(readFileSync(path, 'utf8').split('\n')).toHaveLength(4);
  });

  it('ignores a corrupt line (a crash mid-line) and keeps the rest', () => {
    const path = join(dir, 's.keys');
    const j = new KeyJournal(path, 10);
    j.started('a');
    j.close();
    appendFileSync(path, '{"k":"b","s"\n42\n{"s":1}\n');
    const j2 = new KeyJournal(path, 10);
    j2.answered('a', { error: { code: -32000 } });
    expect([...j2.load()]).toEqual([['a', { state: 'answered', fingerprint: null, answer: { error: { code: -32000 } } }]]);
    j2.close();
  });

  it('a missing file loads as empty', () => {
    expect(new KeyJournal(join(dir, 'none.keys'), 4).load().size).toBe(0);
  });

  it('compacts past 4 × capacity lines, keeping the newest capacity keys', () => {
    const path = join(dir, 's.keys');
    const cap = 5;
    const j = new KeyJournal(path, cap);
    for (let i = 0; i < 40; i++) {
      j.started(`k${i}`, `f${i}`);
      if (i !== 38) j.answered(`k${i}`, i);
      const lines = readFileSync(path, 'utf8').split('\n').length - 1;
      expect(lines).toBeLessThanOrEqual(4 * cap);
    }
    j.close();
    const keys = new KeyJournal(path, cap).load();
    expect([...keys.keys()]).toEqual(['k35', 'k36', 'k37', 'k38', 'k39']);
    expect(keys.get('k38')).toEqual({ state: 'unknown', fingerprint: 'f38' });
    expect(keys.get('k39')).toEqual({ state: 'answered', fingerprint: 'f39', answer: 39 });
    expect(statSync(path).mode & 0o777).toBe(0o600);
  });
});
