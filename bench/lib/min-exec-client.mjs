// The floor for `tether exec -- true` (bench/start.ts): the least a Node program must do for
// the same exchange — connect with ws, initialize, start `true`, wait for its process/closed.
// Plain JavaScript, no TypeScript loader, nothing but `ws`.
import WebSocket from 'ws';

const ws = new WebSocket(process.argv[2], { perMessageDeflate: false });
let nextId = 1;
const pending = new Map();
const request = (method, params) =>
  new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { resolve, reject });
    ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
  });
ws.on('message', (data) => {
  const message = JSON.parse(data.toString());
  if (message.id !== undefined && pending.has(message.id)) {
    const { resolve, reject } = pending.get(message.id);
    pending.delete(message.id);
    if (message.error) reject(new Error(message.error.message));
    else resolve(message.result);
  } else if (message.method === 'process/closed') {
    ws.close();
  }
});
ws.on('open', async () => {
  const init = await request('initialize', { clientName: 'floor' });
  ws.send(JSON.stringify({ jsonrpc: '2.0', method: 'initialized', params: {} }));
  await request('process/start', {
    processId: 'p',
    argv: ['true'],
    cwd: init.environmentInfo.cwd,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    tty: false,
  });
});
ws.on('error', (err) => {
  console.error(err.message);
  process.exit(1);
});
ws.on('close', () => process.exit(0));
