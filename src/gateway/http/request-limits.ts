/**
 * What the gateway's requests in flight hold, bounded (pure). Every /mcp request is weighed
 * before it is parsed (request-weight.ts) and takes a place for its weight until its response
 * ends: a 2025 request in its MCP session's share, a 2026-07-28 request (no session) in its
 * client address's share. Three bounds hold at once, each in count and in weighed bytes:
 *
 * - one client (`maxPerClient`, `maxBytesPerClient`): one session or one address;
 * - one network (`maxPerNetwork`, `maxBytesPerNetwork`): every client from one host's
 *   addresses (loopback is one network, an IPv6 client's /64 another), so a client that makes
 *   many sessions or uses many addresses still holds at most this share and leaves the rest
 *   of the total to the other networks;
 * - everyone (`maxTotal`, `maxTotalBytes`).
 *
 * Past any bound a request is refused at once, saying which bound it met; one heavier than a
 * client's whole share is refused as too heavy (it could never be admitted).
 */
export interface RequestLimitOptions {
  /** Requests in flight at once from all clients. */
  maxTotal: number;
  /** Requests in flight at once from one client (one session, or one address). */
  maxPerClient: number;
  /** Requests in flight at once from one network (default: half of `maxTotal`, at least `maxPerClient`). */
  maxPerNetwork?: number;
  /** Weighed bytes in flight from all clients (default: unbounded). */
  maxTotalBytes?: number;
  /** Weighed bytes in flight from one client (default: `maxTotalBytes`). */
  maxBytesPerClient?: number;
  /** Weighed bytes in flight from one network (default: half of `maxTotalBytes`, at least `maxBytesPerClient`). */
  maxBytesPerNetwork?: number;
}

export type LimitScope = 'client' | 'network' | 'total';

export type Admission =
  | { ok: true; release: () => void }
  /** `request`: this one request weighs more than a client may hold (`limit` bytes). */
  | { ok: false; scope: LimitScope | 'request'; what: 'requests' | 'bytes'; limit: number };

interface Held {
  count: number;
  bytes: number;
}

/** The bounds in force, every default resolved. */
export interface ResolvedLimits {
  maxTotal: number;
  maxPerClient: number;
  maxPerNetwork: number;
  maxTotalBytes: number;
  maxBytesPerClient: number;
  maxBytesPerNetwork: number;
}

export function resolveLimits(opts: RequestLimitOptions): ResolvedLimits {
  const maxTotalBytes = opts.maxTotalBytes ?? Number.POSITIVE_INFINITY;
  const maxBytesPerClient = Math.min(opts.maxBytesPerClient ?? maxTotalBytes, maxTotalBytes);
  const maxPerClient = Math.min(opts.maxPerClient, opts.maxTotal);
  return {
    maxTotal: opts.maxTotal,
    maxPerClient,
    maxPerNetwork: Math.min(opts.maxTotal, opts.maxPerNetwork ?? Math.max(maxPerClient, Math.floor(opts.maxTotal / 2))),
    maxTotalBytes,
    maxBytesPerClient,
    maxBytesPerNetwork: Math.min(maxTotalBytes, opts.maxBytesPerNetwork ?? Math.max(maxBytesPerClient, Math.floor(maxTotalBytes / 2))),
  };
}

export class RequestLimiter {
  private readonly limits: ResolvedLimits;
  private readonly total: Held = { count: 0, bytes: 0 };
  private readonly perClient = new Map<string, Held>();
  private readonly perNetwork = new Map<string, Held>();

  constructor(opts: RequestLimitOptions) {
    this.limits = resolveLimits(opts);
  }

  /** Requests in flight now, overall or from `client`. */
  inFlight(client?: string): number {
    return client === undefined ? this.total.count : (this.perClient.get(client)?.count ?? 0);
  }

  /** Weighed bytes in flight now, overall or from `client`. */
  bytesInFlight(client?: string): number {
    return client === undefined ? this.total.bytes : (this.perClient.get(client)?.bytes ?? 0);
  }

  /**
   * A place for one request of `client` (from `network`, by default its own) weighing
   * `bytes`, or why not. `release` is idempotent.
   */
  admit(client: string, bytes = 0, network = client): Admission {
    const l = this.limits;
    if (bytes > l.maxBytesPerClient) return { ok: false, scope: 'request', what: 'bytes', limit: l.maxBytesPerClient };
    const mine = this.perClient.get(client) ?? { count: 0, bytes: 0 };
    const ours = this.perNetwork.get(network) ?? { count: 0, bytes: 0 };
    const checks: [Held, LimitScope, number, number][] = [
      [mine, 'client', l.maxPerClient, l.maxBytesPerClient],
      [this.total, 'total', l.maxTotal, l.maxTotalBytes],
      [ours, 'network', l.maxPerNetwork, l.maxBytesPerNetwork],
    ];
    for (const [held, scope, maxCount, maxBytes] of checks) {
      if (held.count >= maxCount) return { ok: false, scope, what: 'requests', limit: maxCount };
      if (held.bytes + bytes > maxBytes) return { ok: false, scope, what: 'bytes', limit: maxBytes };
    }
    for (const held of [mine, ours, this.total]) {
      held.count++;
      held.bytes += bytes;
    }
    this.perClient.set(client, mine);
    this.perNetwork.set(network, ours);
    let released = false;
    return {
      ok: true,
      release: () => {
        if (released) return;
        released = true;
        giveBack(this.perClient, client, bytes);
        giveBack(this.perNetwork, network, bytes);
        this.total.count--;
        this.total.bytes -= bytes;
      },
    };
  }
}

function giveBack(map: Map<string, Held>, key: string, bytes: number): void {
  const held = map.get(key);
  if (!held) return;
  held.count--;
  held.bytes -= bytes;
  if (held.count <= 0) map.delete(key);
}

/**
 * The network an address belongs to, for the per-network share: every loopback address (all
 * of 127.0.0.0/8 and ::1) is one host, an IPv6 address counts by its /64 (what one host or
 * site is given), an IPv4 address by itself.
 */
export function networkOf(address: string | undefined): string {
  if (!address) return 'unknown';
  let a = address.toLowerCase();
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a);
  if (mapped) a = mapped[1]!;
  if (/^127\./.test(a) || a === '::1') return 'loopback';
  if (!a.includes(':')) return a;
  return `${expandIpv6(a).slice(0, 4).join(':')}::/64`;
}

/** The eight groups of an IPv6 address (`::` expanded, a zone id dropped). */
function expandIpv6(a: string): string[] {
  const bare = a.split('%')[0]!;
  const [head, tail] = bare.includes('::') ? bare.split('::') as [string, string] : [bare, undefined];
  const front = head ? head.split(':') : [];
  const back = tail ? tail.split(':') : [];
  const fill = tail === undefined ? [] : Array.from({ length: Math.max(0, 8 - front.length - back.length) }, () => '0');
  return [...front, ...fill, ...back].map((g) => g.replace(/^0+(?=.)/, ''));
}
