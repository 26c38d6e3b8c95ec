/**
 * tether-keeper in kept mode (issue #27), driven at the wire level (keeper-wire.ts) without
 * the server: output relayed through the keeper's retained buffers, framed stdin answered by
 * `took`, the command surviving its server (control end of file), adoption over the keeper's
 * Unix socket (new channels and a dump of everything a successor needs), the adopt timer
 * killing the whole tree, backpressure at the cap, and strangers refused.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter, once } from 'node:events';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { launchKeeper, setKeeperLaunch, type KeeperChannels } from '../../../../src/server/local/keeper/launch.js';
import {
  ControlReader,
  DumpReader,
  STDIN_EOF,
  dropMessage,
  encodeKeep,
  encodeSpec,
  encodeStdinFrame,
  markMessage,
  parseStartReport,
  type ControlMessage,
  type KeeperDump,
} from '../../../../src/server/local/keeper/wire.js';
import { nativeAddon } from '../../../../src/server/native/native.js';

const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

/** Output, control messages and the like, re-checked on every change (no polling). */
class Watch extends EventEmitter {
  stdout = Buffer.alloc(0);
  stderr = Buffer.alloc(0);
  messages: ControlMessage[] = [];
  add(stream: 'stdout' | 'stderr', data: Buffer): void {
    this[stream] = Buffer.concat([this[stream], data]);
    this.emit('change');
  }
  addMessages(messages: ControlMessage[]): void {
    this.messages.push(...messages);
    if (messages.length > 0) this.emit('change');
  }
  took(): number {
    return Math.max(0, ...this.messages.map((m) => (m.kind === 'took' ? m.count : 0)));
  }
  until(check: () => boolean, what: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.off('change', test);
        reject(new Error(`timed out waiting for ${what}; stdout=${JSON.stringify(this.stdout.toString('latin1').slice(-200))} messages=${JSON.stringify(this.messages)}`));
      }, 10_000);
      const test = () => {
        if (!check()) return;
        clearTimeout(timer);
        this.off('change', test);
        resolve();
      };
      this.on('change', test);
      test();
    });
  }
}

interface Kept {
  ch: KeeperChannels;
  /** The keeper (spawned; none through the zygote). */
  child: ChildProcess;
  watch: Watch;
  pid: number;
  keeperPid: number;
  path: string;
}

let dir: string;
let previousLaunch: 'zygote' | 'spawn';
const children: ChildProcess[] = [];
const strays: number[] = [];

beforeAll(() => {
  previousLaunch = setKeeperLaunch('spawn'); // the keeper's exit is then a ChildProcess event
  dir = mkdtempSync(path.join(os.tmpdir(), 'tether-kept-'));
  chmodSync(dir, 0o711); // others may pass through, not list: the socket's own mode decides
});
afterAll(() => {
  setKeeperLaunch(previousLaunch);
  rmSync(dir, { recursive: true, force: true });
});
afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const pid of strays.splice(0)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
});

let count = 0;

async function startKept(
  args: string[],
  opts: { adoptMs?: number; capBytes?: number; tty?: boolean; meta?: string; zygote?: boolean } = {},
): Promise<Kept> {
  const sock = path.join(dir, `k${++count}.sock`);
  const messages = Buffer.concat([
    encodeKeep({ adoptMs: opts.adoptMs ?? 30_000, capBytes: opts.capBytes ?? 1 << 20, path: sock, meta: Buffer.from(opts.meta ?? '{"id":"p1"}') }),
    encodeSpec({ file: process.execPath, args, cwd: '/tmp', env: ENV, stdin: true, tty: opts.tty ? { cols: 80, rows: 24 } : undefined }),
  ]);
  let ch: KeeperChannels;
  if (opts.zygote) {
    setKeeperLaunch('zygote');
    try {
      ch = launchKeeper(messages); // queued on the control socket before the keeper gets it
    } finally {
      setKeeperLaunch('spawn');
    }
  } else {
    ch = launchKeeper(Buffer.alloc(0));
  }
  const child = ch.child!;
  if (child) children.push(child);
  const watch = new Watch();
  ch.onOutput((stream, data) => watch.add(stream, Buffer.from(data)));
  const reader = new ControlReader();
  ch.control.setEncoding('latin1');
  ch.control.on('data', (text: string) => watch.addMessages(reader.messages(text)));
  ch.control.on('error', () => {});
  ch.stdin.on('error', () => {});
  let startText = '';
  ch.start.setEncoding('latin1');
  ch.start.on('data', (t: string) => (startText += t));
  const started = once(ch.start, 'end');
  if (!opts.zygote) ch.control.write(messages);
  await started;
  const report = parseStartReport(startText);
  expect(report.error).toBeNull();
  strays.push(report.pid!); // killed after the test should it fail half-way
  return { ch, child, watch, pid: report.pid!, keeperPid: report.keeperPid, path: sock };
}

/** The server goes away (control end of file); resolves once the keeper has let go of its channels. */
async function detach(k: Kept): Promise<void> {
  const closed = once(k.ch.control, 'close');
  k.ch.control.end();
  k.ch.stdin.destroy();
  await closed;
}

interface Adopted {
  control: Socket;
  stdin: Socket;
  stdout: Socket;
  stderr: Socket;
  dump: KeeperDump;
  watch: Watch;
}

/** Adopts the keeper at `sock`: its fds, its dump, then its control lines and output in `watch`. */
async function adopt(sock: string): Promise<Adopted> {
  const { socket, fds } = nativeAddon().connectReceiveFds(sock, 5000);
  expect(fds).toHaveLength(3);
  const control = new Socket({ fd: socket, readable: true, writable: true });
  const stdin = new Socket({ fd: fds[0]!, readable: false, writable: true });
  const stdout = new Socket({ fd: fds[1]!, readable: true, writable: false });
  const stderr = new Socket({ fd: fds[2]!, readable: true, writable: false });
  stdin.on('error', () => {});
  const watch = new Watch();
  stdout.on('data', (d: Buffer) => watch.add('stdout', d));
  stderr.on('data', (d: Buffer) => watch.add('stderr', d));
  const dumpReader = new DumpReader();
  const controlReader = new ControlReader();
  const dump = await new Promise<KeeperDump>((resolve, reject) => {
    control.on('error', reject);
    control.on('close', () => reject(new Error('control closed before the dump ended')));
    control.on('data', (chunk: Buffer) => {
      if (dumpReader.dump) return watch.addMessages(controlReader.messages(chunk.toString('latin1')));
      const done = dumpReader.push(chunk);
      if (!done) return;
      watch.addMessages(controlReader.messages(done.rest.toString('latin1')));
      resolve(done.dump);
    });
  });
  return { control, stdin, stdout, stderr, dump, watch };
}

/** Resolves once `pid` is stopped (state T in /proc/PID/stat), checked every 5 ms for at most 5 s. */
async function stopped(pid: number): Promise<void> {
  for (let waited = 0; !/\) T /.test(readFileSync(`/proc/${pid}/stat`, 'latin1')); waited += 5) {
    if (waited >= 5_000) throw new Error(`pid ${pid} not stopped after 5 s`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

function gone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch {
    return true;
  }
}

/* The command: echoes stdin, says [usr1] on SIGUSR1 and [eof] at stdin's end; optionally starts a `sleep` grandchild. */
const ECHO = `
const { spawn } = require('node:child_process');
if (process.argv[1] === 'grandchild') { const s = spawn('sleep', ['1000'], { stdio: 'ignore', detached: true }); process.stderr.write('sleep=' + s.pid + ';'); }
process.stdout.write('one'); process.stderr.write('err1');
process.on('SIGUSR1', () => process.stdout.write('[usr1]'));
process.stdin.on('data', (d) => process.stdout.write(d));
process.stdin.on('end', () => process.stdout.write('[eof]'));
`;

describe('tether-keeper in kept mode', () => {
  it('relays output, takes framed stdin, survives its server and hands everything over to an adopter', async () => {
    const k = await startKept(['-e', ECHO], { meta: '{"session":"s1"}' });
    await k.watch.until(() => k.watch.stdout.toString() === 'one' && k.watch.stderr.toString() === 'err1', 'the first output');
    k.ch.stdin.write(encodeStdinFrame('x\n', 'w1'));
    await k.watch.until(() => k.watch.took() === 1 && k.watch.stdout.toString() === 'onex\n', 'took 1 and the echo');
    // A frame cut short is never applied, nor counted.
    k.ch.stdin.write(Buffer.from('w 10 2\nw9part'));
    k.ch.control.write(markMessage(1, 1, 3) + markMessage(2, 2, 4) + markMessage(3, 1, 5) + markMessage(4, 'x') + dropMessage(1));

    // A second server while this one is attached is refused.
    expect(() => nativeAddon().connectReceiveFds(k.path, 5000)).toThrow(expect.objectContaining({ code: 'ECONNRESET' }));

    await detach(k);
    expect(k.child.exitCode).toBeNull();
    process.kill(k.pid, 'SIGUSR1'); // output while no server is attached is retained
    const a = await adopt(k.path);
    expect(statSync(k.path).mode & 0o777).toBe(0o600);
    expect(a.dump).toMatchObject({
      pid: k.pid,
      keeperPid: k.keeperPid,
      meta: Buffer.from('{"session":"s1"}'),
      marks: [
        { seq: 2, stream: 2, end: 4 },
        { seq: 3, stream: 1, end: 5 },
        { seq: 4, stream: 'x' },
      ],
      exited: null,
      droppedSeq: 1,
      gone: false,
      stdin: { taken: 1, eof: false },
      ids: ['w1'],
    });
    // Stdout [0, 3) was dropped; the rest of it is retained, then continues on the new channel.
    expect(a.dump.streams[1].base).toBe(3);
    expect(a.dump.streams[2]).toEqual({ base: 0, data: Buffer.from('err1') });
    await a.watch.until(() => Buffer.concat([a.dump.streams[1].data, a.watch.stdout]).toString() === 'x\n[usr1]', 'the output read while detached');

    // Stdin was kept open across the server's end: the command gets the next frame, not an end of file.
    a.stdin.write(encodeStdinFrame('y\n', 'w2'));
    a.stdin.write(encodeStdinFrame('z\n', 'w1')); // a re-sent id: the keeper lists it, the server dedups
    a.stdin.write(STDIN_EOF);
    await a.watch.until(() => a.watch.took() === 4, 'took 4 (continuing the count)');
    await a.watch.until(() => a.watch.stdout.toString().endsWith('y\nz\n[eof]'), 'the frames and the end of file');
    // Its stdin ended, the command exits (told to this server).
    await a.watch.until(() => a.watch.messages.some((m) => m.kind === 'exit'), 'the exit');

    // A second adopter while this one is attached is refused too.
    expect(() => nativeAddon().connectReceiveFds(k.path, 5000)).toThrow(expect.objectContaining({ code: 'ECONNRESET' }));

    // The next successor sees every id, the re-sent one twice, the end of stdin and the exit.
    await (async () => {
      const closed = once(a.control, 'close');
      a.control.end();
      a.stdin.destroy();
      await closed;
    })();
    const b = await adopt(k.path);
    expect(b.dump).toMatchObject({ ids: ['w1', 'w2', 'w1'], stdin: { taken: 4, eof: true }, exited: { code: 0, signal: null }, gone: true });
    const exited = once(k.child, 'exit');
    b.control.write('release\n');
    await exited;
    expect(existsSync(k.path)).toBe(false);
    expect(gone(k.pid)).toBe(true);
  });

  it("adopts a successor that connects before the keeper has read its dead server's last lines and hang-up", async () => {
    const k = await startKept(['-e', ECHO]);
    await k.watch.until(() => k.watch.stdout.toString() === 'one' && k.watch.stderr.toString() === 'err1', 'the first output');
    // Not scheduled (a loaded machine; here SIGSTOP) across the server's last line, its death
    // and the successor's connect: on waking, one poll reports all three, and a read of the
    // control socket takes the line but not yet the end of file behind it.
    process.kill(k.keeperPid, 'SIGSTOP');
    await stopped(k.keeperPid); // else it might take the line before the signal stops it
    const successor = new Socket();
    successor.on('error', () => {});
    try {
      k.ch.control.write(markMessage(1, 1, 3));
      k.ch.control.destroy(); // as a kept stop hands over, or a kill -9 closes
      k.ch.stdin.destroy();
      successor.connect(k.path);
      await once(successor, 'connect'); // queued on the keeper's listening socket
    } finally {
      process.kill(k.keeperPid, 'SIGCONT');
    }
    // A plain socket: the descriptors that come with the first byte are discarded, the dump
    // follows it. A refused successor sees the connection closed without a byte.
    let first: Buffer | null = null;
    const reader = new DumpReader();
    const dump = await new Promise<KeeperDump | null>((resolve) => {
      successor.on('data', (d: Buffer) => {
        if (!first) [first, d] = [d.subarray(0, 1), d.subarray(1)];
        const done = d.length > 0 && !reader.dump ? reader.push(d) : undefined;
        if (done) resolve(done.dump);
      });
      successor.on('close', () => resolve(null));
    });
    expect(first).toEqual(Buffer.from([1]));
    // What the dead server said last was taken before the dump was written.
    expect(dump).toMatchObject({ pid: k.pid, keeperPid: k.keeperPid, marks: [{ seq: 1, stream: 1, end: 3 }], exited: null });
    const exited = once(k.child, 'exit');
    successor.write('kill\n');
    await exited;
    expect(gone(k.pid)).toBe(true);
  });

  it('keeps an ended command for its successor: exit status, output and gone', async () => {
    const k = await startKept(['-e', 'process.stdout.write("bye"); process.stderr.write("e"); process.exitCode = 7']);
    await k.watch.until(() => k.watch.messages.some((m) => m.kind === 'exit'), 'the exit');
    expect(k.watch.messages.find((m) => m.kind === 'exit')).toEqual({ kind: 'exit', code: 7, signal: null });
    expect(k.child.exitCode).toBeNull(); // attached and not released: it stays
    await detach(k);
    const a = await adopt(k.path);
    expect(a.dump).toMatchObject({ exited: { code: 7, signal: null }, gone: true, stdin: { taken: 0, eof: false }, ids: [] });
    expect(a.dump.streams[1].data.toString()).toBe('bye');
    expect(a.dump.streams[2].data.toString()).toBe('e');
    // Both streams ended and are in the dump: the new channels end at once.
    await Promise.all([once(a.stdout, 'end'), once(a.stderr, 'end')]);
    const exited = once(k.child, 'exit');
    a.control.write('release\n');
    await exited;
    expect(existsSync(k.path)).toBe(false);
  });

  it('kills the whole tree and removes its socket when nobody adopts it in time', async () => {
    const k = await startKept(['-e', ECHO, 'grandchild'], { adoptMs: 300 });
    await k.watch.until(() => /sleep=\d+;/.test(k.watch.stderr.toString()), 'the grandchild');
    const sleepPid = Number(/sleep=(\d+);/.exec(k.watch.stderr.toString())![1]);
    strays.push(sleepPid);
    const exited = once(k.child, 'exit');
    await detach(k);
    expect(gone(sleepPid)).toBe(false);
    await exited;
    expect(existsSync(k.path)).toBe(false);
    expect(gone(k.pid)).toBe(true);
    expect(gone(sleepPid)).toBe(true);
  });

  it('after release, control end of file kills the tree and exits at once, as without keep', async () => {
    const k = await startKept(['-e', ECHO], { adoptMs: 60_000 });
    await k.watch.until(() => k.watch.stdout.toString() === 'one', 'the first output');
    k.ch.control.write('release\n');
    const exited = once(k.child, 'exit');
    k.ch.control.end();
    await exited;
    expect(gone(k.pid)).toBe(true);
    expect(existsSync(k.path)).toBe(false);
  });

  it('stops reading the command at the cap and reads on once the server drops', async () => {
    const cap = 64 * 1024;
    const total = 1024 * 1024;
    const k = await startKept(['-e', `process.stdout.write(Buffer.alloc(${total}, 97), () => process.stdout.write('END'))`], { capBytes: cap });
    await k.watch.until(() => k.watch.stdout.length >= cap, 'the cap');
    await detach(k);
    const a = await adopt(k.path);
    // Never more than the cap retained, and nothing read past it: the command is blocked in write(2).
    expect(a.dump.streams[1].base).toBe(0);
    expect(a.dump.streams[1].data.length).toBe(cap);
    expect(k.watch.stdout.length).toBe(cap);
    expect(a.dump.exited).toBeNull();
    // Dropping what the server no longer keeps lets the rest through.
    a.control.write(markMessage(1, 1, cap) + dropMessage(1));
    let acked = cap;
    let seq = 1;
    await a.watch.until(() => {
      const end = cap + a.watch.stdout.length; // the server keeps nothing: it drops all it got
      if (end > acked) {
        seq++;
        a.control.write(markMessage(seq, 1, end) + dropMessage(seq));
        acked = end;
      }
      return a.watch.stdout.toString('latin1').endsWith('END');
    }, 'the rest after drops');
    expect(cap + a.watch.stdout.length).toBe(total + 3);
    a.control.write('kill\n');
  });

  it('runs a terminal command kept, adoptable, with input through frames', async () => {
    const k = await startKept(['-e', 'process.stdin.setRawMode(false); process.stdout.write("tty=" + process.stdout.isTTY); process.stdin.on("data", d => process.stdout.write("got:" + d))'], {
      tty: true,
    });
    await k.watch.until(() => k.watch.stdout.toString().includes('tty=true'), 'the terminal output');
    await detach(k);
    const a = await adopt(k.path);
    expect(a.dump.streams[1].data.toString()).toContain('tty=true');
    a.stdin.write(encodeStdinFrame('hi\r', 'w1'));
    await a.watch.until(() => a.watch.stdout.toString().includes('got:hi'), 'the input echoed');
    await a.watch.until(() => a.watch.took() === 1, 'took 1');
    const exited = once(k.child, 'exit');
    a.control.write('kill\n');
    await exited;
    expect(existsSync(k.path)).toBe(false);
  });

  it('works the same for a keeper launched through the zygote', async () => {
    const k = await startKept(['-e', ECHO], { zygote: true });
    await k.watch.until(() => k.watch.stdout.toString() === 'one', 'the first output');
    k.ch.stdin.write(encodeStdinFrame('a', 'z1'));
    await k.watch.until(() => k.watch.took() === 1 && k.watch.stdout.toString() === 'onea', 'the echo');
    await detach(k);
    const a = await adopt(k.path);
    expect(a.dump).toMatchObject({ pid: k.pid, keeperPid: k.keeperPid, exited: null, ids: ['z1'] });
    expect(a.dump.streams[1].data.toString()).toBe('onea');
    a.stdin.write(encodeStdinFrame('b'));
    await a.watch.until(() => a.watch.stdout.toString() === 'b', 'the echo after adoption');
    const keeperGone = once(a.control, 'close'); // the keeper's exit closes its control socket
    a.control.write('kill\n');
    await keeperGone;
    expect(existsSync(k.path)).toBe(false);
    expect(gone(k.pid)).toBe(true);
  });

  it('connectReceiveFds says why it got nothing: no socket, a silent listener, a bad path', async () => {
    const addon = nativeAddon();
    expect(() => addon.connectReceiveFds(path.join(dir, 'none.sock'), 1000)).toThrow(expect.objectContaining({ code: 'ENOENT', syscall: 'connect' }));
    const silent = createServer();
    const sock = path.join(dir, 'silent.sock');
    await new Promise<void>((resolve) => silent.listen(sock, resolve));
    try {
      expect(() => addon.connectReceiveFds(sock, 50)).toThrow(expect.objectContaining({ code: 'EAGAIN', syscall: 'recvmsg' }));
    } finally {
      silent.close();
    }
    expect(() => addon.connectReceiveFds('x'.repeat(200), 10)).toThrow(expect.objectContaining({ code: 'ENAMETOOLONG' }));
    expect(() => (addon.connectReceiveFds as (...a: unknown[]) => unknown)(1, 2)).toThrow(TypeError);
  });

  const asRoot = process.getuid?.() === 0;
  it.runIf(asRoot)('never hands anything to another user (socket mode, then SO_PEERCRED)', async () => {
    const k = await startKept(['-e', ECHO]);
    await k.watch.until(() => k.watch.stdout.toString() === 'one', 'the first output');
    await detach(k);
    const stranger = async (): Promise<{ code?: string; bytes?: number }> => {
      const script = `const s = require('node:net').connect(process.argv[1]);
        s.on('data', (d) => { console.log(JSON.stringify({ bytes: d.length })); process.exit(0); }); s.on('error', (e) => { console.log(JSON.stringify({ code: e.code })); process.exit(0); });
        s.on('close', () => console.log(JSON.stringify({ bytes: 0 })));`;
      const child = spawn('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, '-e', script, k.path], { stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d));
      await once(child, 'close');
      return JSON.parse(out) as { code?: string; bytes?: number };
    };
    expect(await stranger()).toEqual({ code: 'EACCES' }); // the socket is 0600
    chmodSync(k.path, 0o666);
    expect(await stranger()).toEqual({ bytes: 0 }); // connected, and closed without a byte (SO_PEERCRED)
    const a = await adopt(k.path); // still there for its own user
    expect(a.dump.pid).toBe(k.pid);
    const exited = once(k.child, 'exit');
    a.control.write('kill\n');
    await exited;
  });
});
