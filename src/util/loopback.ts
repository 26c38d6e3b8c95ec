/**
 * Loopback names and addresses, for two checks: a server bound to loopback needs no token
 * (only this machine reaches it), and on such a server the `Host` header must name loopback
 * too, or a web page could reach it through DNS rebinding (its own name, re-pointed at
 * 127.0.0.1). The port is never compared: `ssh -L 9000:localhost:8765` makes clients send
 * `Host: localhost:9000`.
 */
import { isIPv4, isIPv6 } from 'node:net';

/** True for `localhost`, `*.localhost` (RFC 6761: never resolved through DNS), 127.0.0.0/8, ::1 and ::ffff:127.x. */
export function isLoopbackName(name: string): boolean {
  let n = name.toLowerCase();
  if (n.startsWith('[') && n.endsWith(']')) n = n.slice(1, -1);
  if (n.endsWith('.') && !isIPv4(n.slice(0, -1))) n = n.slice(0, -1); // "localhost." is the same name
  if (n === 'localhost' || n.endsWith('.localhost')) return true;
  if (isIPv4(n)) return n.startsWith('127.');
  if (isIPv6(n)) return n === '::1' || n === '0:0:0:0:0:0:0:1' || /^::ffff:127\./.test(n);
  return false;
}

/** The host part of a `Host` header (`name`, `name:port`, `[v6]:port`), or null when it is malformed. */
export function hostOfHeader(header: string): string | null {
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]\s/@]+)(?::(\d{1,5}))?$/.exec(header.trim());
  return m ? m[1]! : null;
}

/** A `Host` header acceptable on a loopback listener: absent (not a browser), loopback, or listed. */
export function isAllowedLoopbackHost(header: string | undefined, allowed: ReadonlySet<string> = new Set()): boolean {
  if (header === undefined) return true;
  const host = hostOfHeader(header);
  if (host === null) return false;
  return isLoopbackName(host) || allowed.has(host.toLowerCase());
}
