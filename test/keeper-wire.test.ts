// The keeper's control-protocol encoding (server/keeper-wire.ts), without a keeper: the spec
// block, the control messages, the exit and start reports, and the errors built from them.
import { constants as osConstants } from 'node:os';
import { describe, expect, it } from 'vitest';
import { ControlReader, encodeSpec, parseStartReport, resizeMessage, signalMessage, signalNumber, startError } from '../src/server/keeper-wire.js';

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
