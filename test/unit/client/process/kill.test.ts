/**
 * `ExecProcess.kill` is shaped like `ChildProcess.kill`: Node's signal names and numbers,
 * SIGTERM by default, a boolean (sent or queued / already gone), nothing awaited. Against
 * a server without tether extensions (Codex knows only `interrupt`) SIGTERM and SIGKILL
 * become `process/terminate`.
 */
import { describe, expect, it } from 'vitest';
import { Acknowledger } from '../../../../src/client/acks.js';
import type { Connection } from '../../../../src/client/connection.js';
import { CodexFlow } from '../../../../src/client/flow.js';
import { ProcessTable } from '../../../../src/client/inbound.js';
import { ExecProcess, type ProcessHost } from '../../../../src/client/process/process.js';
import { ProcessOps } from '../../../../src/client/process/process-ops.js';
import type { SignalName } from '../../../../src/protocol/types.js';

function withHost() {
  const kills: SignalName[] = [];
  const host = { kill: (_p: ExecProcess, signal: SignalName) => void kills.push(signal), fillHole: () => {}, consumed: () => {}, outputBuffered: () => {}, outputWanted: () => {} } as unknown as ProcessHost;
  const proc = new ExecProcess('p1', ['sleep', '30'], { tty: false, pipeStdin: false }, host);
  return { proc, kills };
}

describe('ExecProcess.kill', () => {
  it('maps Node signals (default SIGTERM) and protocol names, and returns true while the process is followed', () => {
    const { proc, kills } = withHost();
    expect(proc.kill()).toBe(true);
    expect(proc.kill('SIGINT')).toBe(true);
    expect(proc.kill(9)).toBe(true);
    expect(proc.kill('hangup')).toBe(true);
    expect(kills).toEqual(['terminate', 'interrupt', 'kill', 'hangup']);
  });

  it('throws for a signal the protocol has no name for, as Node does for an unknown one', () => {
    const { proc, kills } = withHost();
    expect(() => proc.kill('SIGPIPE')).toThrow(TypeError);
    expect(kills).toEqual([]);
  });

  it('returns false once the process exited', () => {
    const { proc, kills } = withHost();
    proc.markStarted();
    proc.accept({ type: 'exit', seq: 1, exitCode: 0 });
    expect(proc.kill()).toBe(false);
    proc.accept({ type: 'close', seq: 2 });
    expect(proc.kill('SIGKILL')).toBe(false);
    expect(kills).toEqual([]);
  });
});

describe('kill against a server without tether extensions (Codex)', () => {
  function ops(extensions: string[]) {
    const requests: Array<[string, unknown]> = [];
    const connection = {
      request: async (method: string, params: unknown) => {
        requests.push([method, params]);
        return method === 'process/terminate' ? { running: true } : {};
      },
    } as unknown as Connection;
    const table = new ProcessTable({ missingChanged: () => {}, forgottenClose: () => {} });
    const flow = new CodexFlow({ limit: undefined, acks: () => false, streams: () => [], pause: () => {}, resume: () => {}, changed: () => {} });
    const acknowledger = new Acknowledger(() => true, 1024);
    const host = new ProcessOps(
      { ready: async () => connection, openConnection: () => undefined, extensions: new Set(extensions) as never, environmentInfo: async () => ({}) as never, logger: undefined },
      table,
      flow,
      acknowledger,
    );
    const proc = new ExecProcess('p1', ['sleep', '30'], { tty: false, pipeStdin: false }, host);
    proc.markStarted();
    return { proc, requests };
  }

  const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

  it('SIGTERM and SIGKILL become process/terminate; SIGINT is interrupt', async () => {
    const { proc, requests } = ops([]);
    proc.kill();
    proc.kill('SIGKILL');
    proc.kill('SIGINT');
    await settle();
    // Each is its own request, not ordered among the others (kill awaits nothing).
    expect(requests).toHaveLength(3);
    expect(requests).toEqual(
      expect.arrayContaining([
        ['process/terminate', { processId: 'p1' }],
        ['process/signal', { processId: 'p1', signal: 'interrupt' }],
      ]),
    );
    expect(requests.filter(([method]) => method === 'process/terminate')).toHaveLength(2);
  });

  it('with tether extensions SIGTERM is process/signal terminate', async () => {
    const { proc, requests } = ops(['acks']);
    proc.kill();
    await settle();
    expect(requests).toEqual([['process/signal', { processId: 'p1', signal: 'terminate' }]]);
  });
});
