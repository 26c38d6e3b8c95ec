// The keeper's control-protocol encoding (server/keeper-wire.ts), without a keeper: the spec
// block, the control messages, the exit and start reports, and the errors built from them.
import { constants as osConstants } from 'node:os';
import { describe, expect, it } from 'vitest';
import {
  ControlReader,
  DumpReader,
  DUMP_META_MAX,
  RELEASE_MESSAGE,
  STDIN_EOF,
  dropMessage,
  encodeKeep,
  encodeSpec,
  encodeStdinFrame,
  markMessage,
  parseStartReport,
  resizeMessage,
  signalMessage,
  signalNumber,
  startError,
} from '../../../../../src/server/local/keeper/wire.js';

describe('keeper wire encoding', () => {
  it('encodes a spec as NUL-terminated fields after a length line', () => {
    const block = encodeSpec({ file: '/bin/echo', args: ['a', 'b'], cwd: '/tmp', env: { X: '1' }, stdin: false });
    const text = block.toString();
    const body = '/tmp\0\0' + '0\0-\0' + '3\0/bin/echo\0a\0b\0X=1\0';
    expect(text).toBe(`spec ${Buffer.byteLength(body)}\n${body}`);
  });

  it('encodes a terminal size, a stdin pipe and argv0', () => {
    const text = encodeSpec({ file: 'sh', args: [], cwd: '/', env: {}, stdin: false, tty: { cols: 0, rows: 24.7 }, argv0: '-sh' }).toString();
    expect(text.split('\n')[1]!.split('\0').slice(0, 4)).toEqual(['/', '1x24', '1', '+-sh']);
  });

  it('refuses NUL bytes in fields and in the environment with ERR_INVALID_ARG_VALUE', () => {
    expect(() => encodeSpec({ file: 'a\0b', args: [], cwd: '/', env: {}, stdin: false })).toThrow(/without null bytes/);
    try {
      encodeSpec({ file: 'a', args: [], cwd: '/', env: { 'A\0B': 'x' }, stdin: false });
      expect.unreachable();
    } catch (err) {
      expect((err as { code?: string }).code).toBe('ERR_INVALID_ARG_VALUE');
      expect((err as Error).message).toContain("'A\\0B'");
    }
  });

  it('writes the control messages', () => {
    expect(signalNumber('SIGTERM')).toBe(osConstants.signals.SIGTERM);
    expect(signalNumber('SIGNOPE' as NodeJS.Signals)).toBe(0);
    expect(signalMessage(15)).toBe('signal 15\n');
    expect(resizeMessage(80.9, 0)).toBe('resize 80 1\n');
  });

  it('reads exit messages split across reads, with signal names', () => {
    const reader = new ControlReader();
    expect(reader.push('exi')).toEqual([]);
    expect(reader.push(`t 3 0\nnoise\nexit -1 ${osConstants.signals.SIGINT}\nexit -1 999\n`)).toEqual([
      { kind: 'exit', code: 3, signal: null },
      { kind: 'exit', code: null, signal: 'SIGINT' },
      { kind: 'exit', code: null, signal: 'SIGKILL' },
    ]);
  });

  it('parses the start report and builds the OS error', () => {
    expect(parseStartReport('pid 12 34\n')).toEqual({ pid: 12, keeperPid: 34, error: null });
    expect(parseStartReport('')).toEqual({ pid: null, keeperPid: 0, error: null });
    const report = parseStartReport(`pid 5 0\nerror exec ${osConstants.errno.ENOENT}\nerror chdir 1\n`);
    expect(report.error).toEqual({ stage: 'exec', errno: osConstants.errno.ENOENT });
    const err = startError('exec', osConstants.errno.ENOENT, '/nope');
    expect(err).toMatchObject({ message: 'spawn /nope ENOENT', code: 'ENOENT', errno: -osConstants.errno.ENOENT, syscall: 'spawn /nope', path: '/nope' });
    const chdir = startError('chdir', osConstants.errno.EACCES, '/bin/true');
    expect(chdir).toMatchObject({ syscall: 'chdir', code: 'EACCES' });
    expect(chdir.path).toBeUndefined();
  });
});

describe('kept-mode wire encoding', () => {
  it('encodes keep, stdin frames, marks, drop and release', () => {
    const keep = encodeKeep({ adoptMs: 300.7, capBytes: 1024, path: '/s/k/ab.sock', meta: Buffer.from('{"a":1}') });
    expect(keep.toString()).toBe('keep 300 1024 12 7\n/s/k/ab.sock{"a":1}');
    expect(() => encodeKeep({ adoptMs: 1, capBytes: 1, path: 'a\0b', meta: Buffer.alloc(0) })).toThrow(/null bytes/);
    expect(encodeStdinFrame('héllo', 'id-1').toString()).toBe('w 6 4\nid-1héllo');
    expect(encodeStdinFrame(Buffer.from([0, 10]))).toEqual(Buffer.concat([Buffer.from('w 2 0\n'), Buffer.from([0, 10])]));
    expect(STDIN_EOF).toBe('eof\n');
    expect(markMessage(4, 1, 100)).toBe('mark 4 1 100\n');
    expect(markMessage(5, 'x')).toBe('mark 5 x\n');
    expect(markMessage(6, 'c')).toBe('mark 6 c\n');
    expect(() => markMessage(7, 2)).toThrow(/end offset/);
    expect(dropMessage(9)).toBe('drop 9\n');
    expect(RELEASE_MESSAGE).toBe('release\n');
  });

  it('reads took lines beside exit lines; push still returns exits alone', () => {
    const reader = new ControlReader();
    expect(reader.messages('took 1\nto')).toEqual([{ kind: 'took', count: 1 }]);
    expect(reader.messages('ok 3\nexit 0 0\ntook x\n')).toEqual([
      { kind: 'took', count: 3 },
      { kind: 'exit', code: 0, signal: null },
    ]);
    expect(new ControlReader().push('took 2\nexit 1 0\n')).toEqual([{ kind: 'exit', code: 1, signal: null }]);
  });

  const dumpBytes = (): Buffer =>
    Buffer.concat([
      Buffer.from('adopted 1\npid 10 11\nmeta 7\n{"a":1}stream 1 5 3\n'),
      Buffer.from([0, 10, 255]),
      Buffer.from('stream 2 0 0\n'),
      Buffer.from(`mark 3 1 5\nmark 4 2 0\nmark 5 x\nmark 6 c\nexited -1 ${osConstants.signals.SIGTERM}\ndropped 2\ngone 1\nstdin 4 1\nid 2\nw1id 0\nend\n`),
      Buffer.from('took 4\n'),
    ]);

  it('parses a whole dump and leaves the bytes after end', () => {
    const result = new DumpReader().push(dumpBytes());
    expect(result).not.toBeNull();
    const { dump, rest } = result!;
    expect(dump).toEqual({
      pid: 10,
      keeperPid: 11,
      meta: Buffer.from('{"a":1}'),
      streams: { 1: { base: 5, data: Buffer.from([0, 10, 255]) }, 2: { base: 0, data: Buffer.alloc(0) } },
      marks: [
        { seq: 3, stream: 1, end: 5 },
        { seq: 4, stream: 2, end: 0 },
        { seq: 5, stream: 'x' },
        { seq: 6, stream: 'c' },
      ],
      exited: { code: null, signal: 'SIGTERM' },
      droppedSeq: 2,
      gone: true,
      stdin: { taken: 4, eof: true },
      ids: ['w1', ''],
    });
    expect(rest.toString()).toBe('took 4\n');
  });

  it('parses the same dump fed one byte at a time', () => {
    const bytes = dumpBytes();
    const reader = new DumpReader();
    let result: ReturnType<DumpReader['push']> = null;
    for (let i = 0; i < bytes.length && !result; i++) result = reader.push(bytes.subarray(i, i + 1));
    expect(result!.dump.streams[1].data).toEqual(Buffer.from([0, 10, 255]));
    expect(result!.dump.ids).toEqual(['w1', '']);
    expect(reader.dump).toBe(result!.dump);
    expect(result!.rest.length).toBe(0); // the bytes after `end\n` were not pushed yet
  });

  it('refuses a dump that is not one', () => {
    expect(() => new DumpReader().push(Buffer.from('exit 0 0\n'))).toThrow(/adopted 1/);
    expect(() => new DumpReader().push(Buffer.from('adopted 1\nstream 3 0 0\n'))).toThrow(/bad line/);
    expect(() => new DumpReader().push(Buffer.from('adopted 1\nbogus\n'))).toThrow(/unknown line/);
    expect(() => new DumpReader().push(Buffer.from(`adopted 1\n${'x'.repeat(300)}`))).toThrow(/too long/);
  });

  it('is bounded: a huge meta or part is refused when announced, before anything of it is held, and so is a dump streaming past its bound', () => {
    expect(() => new DumpReader().push(Buffer.from(`adopted 1\npid 1 2\nmeta ${DUMP_META_MAX + 1}\n`))).toThrow(/a meta of 1048577 bytes/);
    expect(() => new DumpReader(1000).push(Buffer.from('adopted 1\nstream 1 0 5000\n'))).toThrow(/a part of 5000 bytes, over the 1000/);
    expect(() => new DumpReader().push(Buffer.from('adopted 1\nstream 1 0 -1\n'))).toThrow(/bad line|a part of -1/);
    const reader = new DumpReader(1000);
    expect(() => {
      for (let i = 1; i < 1000; i++) reader.push(Buffer.from(`mark ${i} x\n`.replace(/^/, i === 1 ? 'adopted 1\n' : '')));
    }).toThrow(/over 1000 bytes/);
    // A whole dump within its bound is read as before, its trailing bytes not counted.
    expect(new DumpReader(dumpBytes().length - 'took 4\n'.length).push(dumpBytes())).not.toBeNull();
  });
});
