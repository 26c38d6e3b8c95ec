/**
 * The JSON-RPC dialect of the Codex exec-server (docs/protocol.md, "Transport"), as a thin layer in
 * front of `json-rpc-2.0`, which insists on `jsonrpc: "2.0"`:
 * - incoming frames may omit `jsonrpc`; `decodeFrame` adds it so the library accepts them;
 * - outgoing messages carry `jsonrpc` only if the peer's first message did (`Dialect`);
 * - anything that is not one JSON object gets an error reply with `id: null`.
 */
import { ErrorCode } from './codes.js';

export type JsonRpcId = string | number;

export interface JsonRpcErrorObject {
  code: number;
  message: string;
  data?: unknown;
}

export type JsonRpcMessage =
  /** `id: null` is a request too (JSON-RPC 2.0 allows it, discouraged): it is answered with `id: null`. */
  | { kind: 'request'; id: JsonRpcId | null; method: string; params?: unknown }
  | { kind: 'notification'; method: string; params?: unknown }
  | { kind: 'response'; id: JsonRpcId | null; result?: unknown; error?: JsonRpcErrorObject };

export type DecodeResult =
  | { ok: true; message: JsonRpcMessage; raw: Record<string, unknown>; hasJsonrpc: boolean }
  | { ok: false; error: JsonRpcErrorObject; id: JsonRpcId | null };

const isId = (v: unknown): v is JsonRpcId => typeof v === 'string' || (typeof v === 'number' && Number.isInteger(v));

/** Decodes one WebSocket frame (text or binary UTF-8) into a classified JSON-RPC message. */
export function decodeFrame(data: string | Buffer | ArrayBuffer | Buffer[]): DecodeResult {
  const text =
    typeof data === 'string'
      ? data
      : Array.isArray(data)
        ? Buffer.concat(data).toString('utf8')
        : Buffer.isBuffer(data)
          ? data.toString('utf8') // not Buffer.from(data): that would copy every frame first
          : Buffer.from(data).toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return {
      ok: false,
      id: null,
      error: { code: ErrorCode.ParseError, message: `parse error: ${(err as Error).message}` },
    };
  }
  if (Array.isArray(value)) {
    return { ok: false, id: null, error: { code: ErrorCode.InvalidRequest, message: 'batch requests are not supported' } };
  }
  if (value === null || typeof value !== 'object') {
    return { ok: false, id: null, error: { code: ErrorCode.InvalidRequest, message: 'message must be a JSON object' } };
  }
  const raw = value as Record<string, unknown>;
  const hasJsonrpc = raw.jsonrpc === '2.0';
  if (raw.jsonrpc !== undefined && !hasJsonrpc) {
    return invalid(raw, 'jsonrpc must be "2.0" when present');
  }
  if (typeof raw.method === 'string') {
    if ('id' in raw) {
      if (raw.id !== null && !isId(raw.id)) return invalid(raw, 'id must be an integer, a string or null');
      return { ok: true, raw, hasJsonrpc, message: { kind: 'request', id: raw.id as JsonRpcId | null, method: raw.method, params: raw.params } };
    }
    return { ok: true, raw, hasJsonrpc, message: { kind: 'notification', method: raw.method, params: raw.params } };
  }
  if ('result' in raw || 'error' in raw) {
    const id = isId(raw.id) ? raw.id : null;
    return {
      ok: true,
      raw,
      hasJsonrpc,
      message: { kind: 'response', id, result: raw.result, error: raw.error as JsonRpcErrorObject | undefined },
    };
  }
  return invalid(raw, 'message is neither a request, a notification nor a response (no method, result or error)');
}

function invalid(raw: Record<string, unknown>, message: string): DecodeResult {
  return { ok: false, id: isId(raw.id) ? raw.id : null, error: { code: ErrorCode.InvalidRequest, message } };
}

/** Adds `jsonrpc: "2.0"` so `json-rpc-2.0` accepts a message from a peer that omits it. */
export function withJsonrpc<T extends object>(message: T): T & { jsonrpc: '2.0' } {
  return { jsonrpc: '2.0', ...message };
}

/**
 * Per-connection dialect: a server learns it from the client's first message; a client
 * chooses it. `encode` serializes an outgoing message in that dialect.
 */
export class Dialect {
  private decided = false;
  constructor(private echoJsonrpc = false) {}

  /** Called with every decoded incoming message; only the first one decides. */
  observe(hasJsonrpc: boolean): void {
    if (this.decided) return;
    this.decided = true;
    this.echoJsonrpc = hasJsonrpc;
  }

  get usesJsonrpc(): boolean {
    return this.echoJsonrpc;
  }

  encode(message: object): string {
    const { jsonrpc: _drop, ...rest } = message as Record<string, unknown>;
    return stringifyMessage(this.echoJsonrpc ? { jsonrpc: '2.0', ...rest } : rest);
  }
}

/**
 * A base64 string inside a message (file data). Base64 never needs JSON escaping, so
 * `stringifyMessage` splices it in instead of letting JSON.stringify scan it, which costs
 * Node 20 about 5 ms per MiB; elsewhere it serializes as the plain string.
 */
export class Base64Text {
  constructor(readonly text: string) {}

  toJSON(): string {
    return this.text;
  }
}

const BASE64_MARK = `\u0001tether-base64-${Math.random().toString(36).slice(2)}`;
const BASE64_MARK_JSON = JSON.stringify(BASE64_MARK);

/** JSON.stringify for messages, with `Base64Text` members of `params` or `result` spliced in unscanned. */
export function stringifyMessage(message: object): string {
  const m = message as { params?: unknown; result?: unknown };
  if (!hasBase64Text(m.params) && !hasBase64Text(m.result)) return JSON.stringify(message);
  const texts: string[] = [];
  const json = JSON.stringify(message, function (this: Record<string, unknown>, key: string, value: unknown) {
    const original = this[key];
    if (!(original instanceof Base64Text)) return value;
    texts.push(original.text);
    return BASE64_MARK;
  });
  const parts = json.split(BASE64_MARK_JSON);
  let out = parts[0]!;
  for (let i = 1; i < parts.length; i++) out += `"${texts[i - 1]}"${parts[i]}`;
  return out;
}

function hasBase64Text(container: unknown): boolean {
  if (!container || typeof container !== 'object') return false;
  for (const value of Object.values(container)) if (value instanceof Base64Text) return true;
  return false;
}
