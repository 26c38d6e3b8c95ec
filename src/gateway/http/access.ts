/**
 * Who may talk to the gateway's HTTP listener. Every endpoint, every method:
 *
 * - Host: a gateway bound to loopback answers only requests addressed to a loopback name
 *   (DNS rebinding: evil.example resolving to 127.0.0.1). Only the name is checked, not the
 *   port: a forwarded port (ssh -L, a container mapping) still names loopback. A gateway
 *   bound to another address accepts that address and the names in `allowedHosts`.
 * - Origin: a browser sends it on cross-origin requests (and on every POST). Only the
 *   gateway's own origin (its status page) and `allowedOrigins` pass; here the port counts:
 *   a page on http://localhost:3000 is another origin and must not trigger reconnects.
 *   Requests without Origin (curl, MCP SDK clients, hosts) are not from a web page.
 * - Token (optional, --token-file): `Authorization: Bearer <token>`, or the status page's
 *   cookie, which the page gets once in exchange for the token (EventSource cannot send
 *   headers). The cookie is HttpOnly and SameSite=Strict and holds a random value, never the
 *   token itself.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

export const COOKIE_NAME = 'tether_gateway';
const LOOPBACK_NAMES = new Set(['127.0.0.1', 'localhost', '::1', '[::1]']);

export interface AccessOptions {
  /** The address the listener is bound to. */
  bindHost: string;
  port: () => number;
  token?: string;
  allowedOrigins?: string[];
  allowedHosts?: string[];
}

export type AccessVerdict = { ok: true } | { ok: false; status: 401 | 403; error: string };

export class AccessControl {
  /** Cookie values handed out (random), each standing for the token. Bounded. */
  private readonly cookies = new Set<string>();

  constructor(private readonly opts: AccessOptions) {}

  get tokenRequired(): boolean {
    return this.opts.token !== undefined;
  }

  /** Host and Origin: checked before anything else, on every request. */
  checkAddressing(req: IncomingMessage): AccessVerdict {
    const hostName = hostnameOf(req.headers.host);
    if (hostName === null || !this.hostAllowed(hostName)) return { ok: false, status: 403, error: `forbidden Host header: ${req.headers.host ?? '(none)'}` };
    const origin = header(req, 'origin');
    if (origin !== undefined && origin !== 'null' && !this.originAllowed(origin)) return { ok: false, status: 403, error: `forbidden Origin: ${origin}` };
    if (origin === 'null') return { ok: false, status: 403, error: 'forbidden Origin: null' };
    return { ok: true };
  }

  /** The token (header or cookie), when one is configured. */
  checkToken(req: IncomingMessage): AccessVerdict {
    if (this.opts.token === undefined) return { ok: true };
    const auth = header(req, 'authorization');
    const bearer = auth && /^Bearer\s+(.+)$/i.exec(auth)?.[1]?.trim();
    if (bearer && this.isToken(bearer)) return { ok: true };
    const cookie = cookieValue(req, COOKIE_NAME);
    if (cookie && this.cookies.has(cookie)) return { ok: true };
    return { ok: false, status: 401, error: 'a token is required: Authorization: Bearer <token> (the token in --token-file)' };
  }

  isToken(candidate: string): boolean {
    const token = this.opts.token;
    if (token === undefined) return false;
    const a = Buffer.from(candidate);
    const b = Buffer.from(token);
    return a.length === b.length && timingSafeEqual(a, b);
  }

  /** A fresh cookie for the status page, after it showed the token once. */
  issueCookie(): string {
    const value = randomBytes(24).toString('base64url');
    if (this.cookies.size >= 1000) this.cookies.delete(this.cookies.values().next().value!);
    this.cookies.add(value);
    return `${COOKIE_NAME}=${value}; HttpOnly; SameSite=Strict; Path=/`;
  }

  private hostAllowed(name: string): boolean {
    const bind = this.opts.bindHost.toLowerCase();
    if (this.opts.allowedHosts?.some((h) => h.toLowerCase() === name)) return true;
    if (LOOPBACK_NAMES.has(bind)) return LOOPBACK_NAMES.has(name);
    // Bound to all interfaces or a specific address: that address, loopback, or the allowed names.
    return name === bind.replace(/^\[|\]$/g, '') || name === `[${bind}]` || LOOPBACK_NAMES.has(name) || bind === '0.0.0.0' || bind === '::';
  }

  private originAllowed(origin: string): boolean {
    if (this.opts.allowedOrigins?.includes(origin)) return true;
    let url: URL;
    try {
      url = new URL(origin);
    } catch {
      return false;
    }
    // The gateway's own pages: this port, a name the Host check accepts.
    const port = url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port);
    return url.protocol === 'http:' && port === this.opts.port() && this.hostAllowed(url.hostname.toLowerCase());
  }
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** The host name of a Host header (brackets kept for IPv6), lower-cased; null if malformed. */
export function hostnameOf(hostHeader: string | undefined): string | null {
  if (!hostHeader) return null;
  const m = /^(\[[^\]]+\]|[^:[\]]+)(?::(\d+))?$/.exec(hostHeader.trim());
  return m ? m[1]!.toLowerCase() : null;
}

function cookieValue(req: IncomingMessage, name: string): string | undefined {
  const raw = req.headers.cookie;
  if (!raw) return undefined;
  for (const part of raw.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}
