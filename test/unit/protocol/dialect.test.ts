import { describe, expect, it } from 'vitest';
import {
  Dialect,
  ErrorCode,
  ProcessStartParamsSchema,
  ProcessWriteParamsSchema,
  RpcError,
  decodeFrame,
  parseParams,
} from '../../../src/protocol/index.js';

describe('decodeFrame', () => {
  it('accepts requests with and without the jsonrpc member', () => {
    const bare = decodeFrame('{"id":1,"method":"initialize","params":{"clientName":"x"}}');
    expect(bare).toMatchObject({ ok: true, hasJsonrpc: false, message: { kind: 'request', id: 1, method: 'initialize' } });
    const full = decodeFrame('{"jsonrpc":"2.0","id":"a","method":"initialized"}');
    expect(full).toMatchObject({ ok: true, hasJsonrpc: true, message: { kind: 'request', id: 'a' } });
  });

  it('classifies notifications and responses', () => {
    expect(decodeFrame('{"method":"initialized","params":{}}')).toMatchObject({
      ok: true,
      message: { kind: 'notification', method: 'initialized' },
    });
    expect(decodeFrame('{"id":3,"result":{}}')).toMatchObject({ ok: true, message: { kind: 'response', id: 3 } });
    expect(decodeFrame('{"id":-1,"error":{"code":-32600,"message":"bad"}}')).toMatchObject({
      ok: true,
      message: { kind: 'response', id: -1, error: { code: -32600 } },
    });
  });

  it('decodes binary frames carrying UTF-8 JSON', () => {
    expect(decodeFrame(Buffer.from('{"id":2,"method":"environment/status"}'))).toMatchObject({
      ok: true,
      message: { kind: 'request', id: 2 },
    });
  });

  it('classifies a method with id null as a request (answered with id null), not a notification', () => {
    expect(decodeFrame('{"id":null,"method":"x"}')).toMatchObject({ ok: true, message: { kind: 'request', id: null, method: 'x' } });
    expect(decodeFrame('{"method":"x"}')).toMatchObject({ ok: true, message: { kind: 'notification' } });
  });

  it('answers unparsable JSON with -32700 and id null', () => {
    const result = decodeFrame('{not json');
    expect(result).toMatchObject({ ok: false, id: null, error: { code: ErrorCode.ParseError } });
  });

  it('refuses batches, non-objects and shapeless objects with -32600', () => {
    expect(decodeFrame('[{"id":1,"method":"x"}]')).toMatchObject({ ok: false, id: null, error: { code: -32600 } });
    expect(decodeFrame('42')).toMatchObject({ ok: false, id: null, error: { code: -32600 } });
    expect(decodeFrame('null')).toMatchObject({ ok: false, id: null, error: { code: -32600 } });
    expect(decodeFrame('{"id":7}')).toMatchObject({ ok: false, id: 7, error: { code: -32600 } });
    expect(decodeFrame('{"id":{},"method":"x"}')).toMatchObject({ ok: false, id: null, error: { code: -32600 } });
    expect(decodeFrame('{"jsonrpc":"1.0","id":1,"method":"x"}')).toMatchObject({ ok: false, id: 1 });
  });
});

describe('Dialect', () => {
  it('echoes the jsonrpc member only if the first message carried it', () => {
    const codexStyle = new Dialect();
    codexStyle.observe(false);
    codexStyle.observe(true); // later messages do not change the decision
    expect(JSON.parse(codexStyle.encode({ jsonrpc: '2.0', id: 1, result: {} }))).toEqual({ id: 1, result: {} });

    const strict = new Dialect();
    strict.observe(true);
    expect(JSON.parse(strict.encode({ id: 1, result: {} }))).toEqual({ jsonrpc: '2.0', id: 1, result: {} });
  });
});

describe('parseParams', () => {
  const validStart = { processId: 'p1', argv: ['true'], cwd: 'file:///tmp', env: {}, tty: false };

  it('accepts valid params and ignores unknown ones', () => {
    const parsed = parseParams('process/start', ProcessStartParamsSchema, { ...validStart, future: 1 });
    expect(parsed.processId).toBe('p1');
    expect(parsed).not.toHaveProperty('future');
  });

  it('names the field and the reason in a -32602 error', () => {
    const attempt = () => parseParams('process/start', ProcessStartParamsSchema, { ...validStart, argv: [] });
    expect(attempt).toThrow(RpcError);
    try {
      attempt();
    } catch (err) {
      expect((err as RpcError).code).toBe(ErrorCode.InvalidParams);
      expect((err as RpcError).message).toBe('invalid params for process/start: argv: argv must name a program (it is empty)');
    }
  });

  it('rejects a cwd that is not a file URI, and bad base64 or empty writeIds', () => {
    expect(() => parseParams('process/start', ProcessStartParamsSchema, { ...validStart, cwd: '/tmp' })).toThrow(
      /cwd: must be a file:\/\/ URI/,
    );
    expect(() =>
      parseParams('process/write', ProcessWriteParamsSchema, { processId: 'p', chunk: '!!', writeId: 'w' }),
    ).toThrow(/chunk: must be valid base64/);
    expect(() =>
      parseParams('process/write', ProcessWriteParamsSchema, { processId: 'p', chunk: 'aGk=', writeId: '' }),
    ).toThrow(/writeId: writeId must not be empty/);
  });

  it('reports a missing field by name', () => {
    expect(() => parseParams('process/start', ProcessStartParamsSchema, { processId: 'p' })).toThrow(/argv: /);
  });
});
