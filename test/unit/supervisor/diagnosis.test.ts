// Failure diagnosis alone (src/supervisor/diagnosis.ts): tether's errors by class, plain values.
import { describe, expect, it } from 'vitest';
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js';
import { SessionLostError, AuthRefusedError } from '../../../src/client/errors.js';
import { RpcError } from '../../../src/protocol/errors.js';
import { TimeoutError } from '../../../src/util/timeouts.js';
import { classifyFailure, describeFailure, TransportClosedError } from '../../../src/supervisor/diagnosis.js';
import type { Connection } from '../../../src/supervisor/transport/connection.js';
import type { ServerSpec } from '../../../src/supervisor/types.js';

const conn = (over: Partial<Connection> = {}): Connection =>
  ({ id: 1, client: {} as never, transport: {} as never, closedByUs: false, closed: false, errors: [], stderrTail: '', invalidStdout: [], linkDown: null, ...over }) as Connection;
const exec: ServerSpec = { name: 'x', kind: 'exec', command: 'srv', tether: { url: 'ws://h' } } as ServerSpec;
const stdio: ServerSpec = { name: 'x', kind: 'stdio', command: 'srv' } as ServerSpec;

describe('classifyFailure', () => {
  it('auth wins, whatever the kind', () => {
    expect(classifyFailure('exec', new SessionLostError('auth'), conn())).toBe('auth');
    expect(classifyFailure('stdio', new Error('x'), conn({ errors: [new AuthRefusedError(401, '')] }))).toBe('auth');
  });
  it('exec: a lost session is a loss, a refused spawn (RpcError) a crash', () => {
    expect(classifyFailure('exec', new SessionLostError('expired'), conn({ closed: true }))).toBe('loss');
    expect(classifyFailure('exec', new RpcError(-32603, 'cannot start srv: ENOENT'), conn())).toBe('crash');
  });
  it('http: anything else is a loss; stdio: a close we did not ask for is a crash', () => {
    expect(classifyFailure('http', new McpError(ErrorCode.ConnectionClosed, 'closed'), conn({ closed: true }))).toBe('loss');
    expect(classifyFailure('stdio', new TransportClosedError('stdio'), conn({ closed: true }))).toBe('crash');
    expect(classifyFailure('stdio', Object.assign(new Error('spawn srv ENOENT'), { code: 'ENOENT' }), undefined)).toBe('crash');
  });
});

describe('describeFailure', () => {
  it('a refused spawn names the command once', () => {
    expect(describeFailure(exec, new RpcError(-32603, "cannot start 'srv': No such file"), conn(), 'crash')).toBe("the tether server cannot start 'srv': No such file");
    expect(describeFailure(exec, new RpcError(-32603, 'bad cwd'), conn(), 'crash')).toBe('the tether server could not start "srv": bad cwd');
  });
  it("a remote exit says the code (ServerProcessExitedError's field)", () => {
    const err = Object.assign(new Error('remote MCP server process exited with code 3; its last stderr output:\nboom'), { name: 'ServerProcessExitedError', exitCode: 3 });
    expect(describeFailure(exec, err, conn(), 'crash')).toBe('remote MCP server process exited with code 3');
  });
  it("a local server's exit replaces a bare close; its stderr is added when it is the suspect", () => {
    const c = conn({ transport: { exitInfo: { code: 2, signal: null } } as never, stderrTail: 'Error: missing API key\n' });
    expect(describeFailure(stdio, new TransportClosedError('stdio'), c, 'crash')).toBe('server process exited with code 2; stderr: Error: missing API key');
  });
  it('a timeout (ours, or as a cause) makes the server a suspect even on a loss', () => {
    const c = conn({ stderrTail: 'Error: stuck\n' });
    expect(describeFailure(stdio, new TimeoutError('connection attempt timed out after 10 ms', 10), c, 'loss')).toContain('stderr: Error: stuck');
    expect(describeFailure(exec, new SessionLostError('deadline', { cause: new TimeoutError('x timed out after 1 ms', 1) }), c, 'loss')).toContain('stderr: Error: stuck');
    expect(describeFailure(exec, new SessionLostError('expired'), c, 'loss')).not.toContain('stderr');
  });
  it('stray stdout lines are named', () => {
    expect(describeFailure(stdio, new Error('x'), conn({ invalidStdout: ['hello'] }), 'loss')).toContain('the server wrote non-JSON to stdout');
  });
});
