/**
 * The contract with the running Node (issue #27): each thing src/util/node-internals.ts relies
 * on in Node's private workings, checked on real sockets on 127.0.0.1. A Node that changes
 * one of them fails here with "Node vX changed ...", naming what `tether serve --replace`
 * would have broken, instead of a hand-over that silently finds no descriptor.
 */
import { fstatSync, readFileSync, writeSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { listeningFd, socketFd } from '../../src/util/node-internals.js';

const changed = (what: string) => `Node ${process.version} changed ${what} (src/util/node-internals.ts)`;

const cleanup: Array<() => void> = [];
afterEach(() => {
  for (const undo of cleanup.splice(0)) undo();
});

function listen(server: Server): Promise<number> {
  cleanup.push(() => server.close());
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
  });
}

/** Linux: the inode of the socket listening on 127.0.0.1:`port`, from /proc/net/tcp (null elsewhere). */
function listeningInode(port: number): number | null {
  if (process.platform !== 'linux') return null;
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  for (const line of readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    // local_address rem_address st ... inode (field 9); 0A is LISTEN
    if (f[1] === `0100007F:${hexPort}` && f[3] === '0A') return Number(f[9]);
  }
  return null;
}

describe('listeningFd', () => {
  it.each([
    ['net.Server', () => createServer()],
    ['http.Server', () => createHttpServer()],
  ])('of a listening %s is the descriptor of the very socket that listens', async (_, make) => {
    const server = make();
    const port = await listen(server);
    const fd = listeningFd(server);
    expect(fd, changed('where a listening server keeps its descriptor (_handle.fd)')).toEqual(expect.any(Number));
    const stat = fstatSync(fd!);
    expect(stat.isSocket(), changed('the listening descriptor: it is no socket')).toBe(true);
    const inode = listeningInode(port);
    if (inode !== null) expect(stat.ino, changed('the listening descriptor: another socket than the one listening')).toBe(inode);
  });

  it('is null before listening and once closed', async () => {
    const server = createServer();
    expect(listeningFd(server)).toBeNull();
    await listen(server);
    await new Promise<void>((resolve) => server.close(() => resolve()));
    expect(listeningFd(server), changed('a closed server: it still has a descriptor')).toBeNull();
  });
});

describe('socketFd', () => {
  it('of a connected socket is its descriptor: bytes written to it reach the peer', async () => {
    const server = createServer();
    const port = await listen(server);
    const accepted = new Promise<Socket>((resolve) => server.once('connection', resolve));
    const client = connect(port, '127.0.0.1');
    cleanup.push(() => client.destroy());
    const message = 'through the descriptor';
    let text = '';
    const got = new Promise<string>((resolve) => {
      client.setEncoding('latin1');
      client.on('data', (chunk: string) => {
        text += chunk;
        if (text.length >= message.length) resolve(text);
      });
    });
    const socket = await accepted;
    cleanup.push(() => socket.destroy());
    const fd = socketFd(socket);
    expect(fd, changed('where a socket keeps its descriptor (_handle.fd)')).toEqual(expect.any(Number));
    expect(fstatSync(fd!).isSocket(), changed('a socket descriptor: it is no socket')).toBe(true);
    // Written around Node: if this is the socket's descriptor, the client reads it.
    expect(writeSync(fd!, message)).toBe(message.length);
    expect(await got, changed('a socket descriptor: its peer did not get what was written to it')).toBe(message);
  });

  it('is null once the socket is destroyed', async () => {
    const server = createServer((s) => s.destroy());
    const port = await listen(server);
    const client = connect(port, '127.0.0.1');
    await new Promise((resolve) => client.once('connect', resolve));
    expect(socketFd(client)).toEqual(expect.any(Number));
    client.destroy();
    expect(socketFd(client), changed('a destroyed socket: it still has a descriptor')).toBeNull();
  });
});
