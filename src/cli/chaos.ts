/**
 * `tether chaos`: a TCP proxy that makes a link flaky on purpose, for users' own tests of
 * whatever runs over it. The URL to connect to is the first line of stdout; what it does
 * goes to stderr as it happens, and a summary when it stops.
 */
import { ChaosProxy } from '../chaos/proxy.js';
import { ChaosPlan, type Fault, type ScheduledFault, type Window } from '../chaos/schedule.js';
import { seededRandom } from '../chaos/random.js';
import { attachLog, formatStats } from '../chaos/report.js';
import { DURATION_SYNTAX, parseDuration, parseSize } from './units.js';
import { parseFlags, parseOrReport, printHelp, UsageError } from './usage.js';

export const CHAOS_USAGE = `usage: tether chaos --to TARGET [options] [faults]

A TCP proxy that makes the link to TARGET flaky on purpose, to test what runs over it
(a tether client and server, or anything else on TCP). Prints the address to connect to as
the first line of stdout; says what it does on stderr as it does it; sums it up on exit.

options:
  --to TARGET                 where to forward: ws://HOST:PORT, HOST:PORT or PORT (required)
  --listen ADDRESS            where to listen: HOST:PORT or PORT (default 127.0.0.1, any free port)
  --duration DURATION         stop after this long (default: at Ctrl-C or SIGTERM)
  --seed N                    seed for jitter and random reset times (default: random, printed)
  --json                      log as JSON lines, the summary too
  --quiet                     log fault changes and the summary, not every connection
  -h, --help                  show this help

faults (a fault holds from start to end, or within @WINDOW; each may be given more than
once, the last one given wins where windows overlap):
  --latency DURATION[..DURATION]      delay each direction (a round trip gains twice as much);
                                      a range is a uniformly random delay (jitter); order is kept
  --bandwidth SIZE[/s]                cap each direction of each connection (e.g. 64KiB/s)
  --reset-every DURATION[..DURATION]  reset every live connection at this interval (a range:
                                      random intervals within it)
  --reset-after [up:|down:]SIZE       end each connection once SIZE bytes have crossed it (in
                                      both directions added, or one): exactly SIZE are delivered
  --blackhole [hold|drop]             forward nothing and close nothing (a sleeping laptop, a
                                      NAT that forgot you): bytes wait for the hole to lift
                                      (hold, the default) or are lost (drop)
  --refuse                            reset new connections at once (the host is unreachable)

WINDOW:
  @10s..20s    from 10 s to 20 s after the start
  @30s..       from 30 s on
  @5s/30s      the last 5 s of every 30 s (so the link starts healthy)

${DURATION_SYNTAX}. SIZE: 512B, 64KiB, 1MiB (a bare number is bytes).

examples:
  tether chaos --to ws://127.0.0.1:8765 --listen 8767 --reset-every 5s..20s
  tether chaos --to 8765 --latency 80ms..120ms --bandwidth 256KiB/s --blackhole @10s/60s
  tether chaos --to 8765 --reset-after down:1MiB --refuse @30s..40s --duration 1m`;

export interface ChaosConfig {
  targetHost: string;
  targetPort: number;
  /** The scheme of --to (ws, wss, http, ...), used to print a URL like it; '' for HOST:PORT. */
  scheme: string;
  listenHost: string;
  listenPort: number;
  durationMs?: number;
  seed: number;
  json: boolean;
  quiet: boolean;
  plan: ScheduledFault[];
}

const DEFAULT_PORTS: Record<string, number> = { ws: 80, http: 80, wss: 443, https: 443 };

function parsePort(flag: string, text: string): number {
  const port = Number(text);
  if (!/^\d+$/.test(text) || port > 65535) throw new UsageError(`${flag}: invalid port '${text}'`);
  return port;
}

/** ws://HOST:PORT (any scheme), HOST:PORT, [V6]:PORT or PORT. */
export function parseAddress(flag: string, text: string, defaultHost: string): { host: string; port: number; scheme: string } {
  if (/^\d+$/.test(text)) return { host: defaultHost, port: parsePort(flag, text), scheme: '' };
  const schemed = /^([a-z][a-z0-9+.-]*):\/\//i.exec(text);
  if (schemed) {
    let url: URL;
    try {
      url = new URL(text);
    } catch {
      throw new UsageError(`${flag}: invalid URL '${text}'`);
    }
    const scheme = url.protocol.slice(0, -1);
    const port = url.port ? Number(url.port) : DEFAULT_PORTS[scheme];
    if (port === undefined) throw new UsageError(`${flag}: '${text}' has no port`);
    return { host: url.hostname.replace(/^\[(.*)\]$/, '$1'), port, scheme };
  }
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(text);
  if (!m) throw new UsageError(`${flag}: expected ws://HOST:PORT, HOST:PORT or PORT, got '${text}'`);
  return { host: m[1] ?? m[2]!, port: parsePort(flag, m[3]!), scheme: '' };
}

/** A duration that may be zero (the start of a window). */
function parseOffset(flag: string, text: string): number {
  if (/^\s*0+(\.0*)?\s*(ms|s|m|h)?\s*$/i.test(text)) return 0;
  return parseDuration(flag, text);
}

/** DURATION or DURATION..DURATION, as [min, max]. */
function parseRange(flag: string, text: string): [number, number] {
  const [a, b, ...rest] = text.split('..');
  if (rest.length > 0 || a === undefined) throw new UsageError(`${flag}: expected DURATION or DURATION..DURATION, got '${text}'`);
  const min = parseOffset(flag, a);
  const max = b === undefined ? min : parseDuration(flag, b);
  if (max < min) throw new UsageError(`${flag}: '${text}': the range ends before it starts`);
  return [min, max];
}

export function parseWindow(flag: string, text: string): Window {
  if (text === '') return { kind: 'always' };
  if (text.includes('/')) {
    const [forText, everyText] = text.split('/') as [string, string];
    const forMs = parseDuration(flag, forText);
    const everyMs = parseDuration(flag, everyText);
    if (forMs >= everyMs) throw new UsageError(`${flag}: @${text}: the fault must last less than its period`);
    return { kind: 'periodic', forMs, everyMs };
  }
  const between = /^([^.]+)\.\.([^.]*)$/.exec(text);
  if (!between) throw new UsageError(`${flag}: invalid window '@${text}' (expected @10s..20s, @30s.. or @5s/30s)`);
  const fromMs = parseOffset(flag, between[1]!);
  const toMs = between[2] ? parseDuration(flag, between[2]) : Infinity;
  if (toMs <= fromMs) throw new UsageError(`${flag}: window '@${text}' ends before it starts`);
  return { kind: 'between', fromMs, toMs };
}

/** VALUE[@WINDOW] */
function splitWindow(flag: string, text: string): [string, Window] {
  const at = text.indexOf('@');
  if (at < 0) return [text, { kind: 'always' }];
  const window = text.slice(at + 1);
  if (window === '') throw new UsageError(`${flag}: empty window after '@' in '${text}'`);
  return [text.slice(0, at), parseWindow(flag, window)];
}

function parseFault(flag: string, value: string): ScheduledFault {
  const [text, window] = splitWindow(flag, value);
  const fault = ((): Fault => {
    switch (flag) {
      case '--latency': {
        const [min, max] = parseRange(flag, text);
        return { kind: 'latency', ms: (min + max) / 2, jitterMs: (max - min) / 2 };
      }
      case '--bandwidth':
        return { kind: 'bandwidth', bytesPerSecond: parseSize(flag, text.replace(/\/s$/i, '')) };
      case '--reset-every': {
        const [minMs, maxMs] = parseRange(flag, text);
        if (minMs <= 0) throw new UsageError(`${flag}: the interval must be greater than zero`);
        return { kind: 'reset', minMs, maxMs };
      }
      case '--reset-after': {
        const m = /^(?:(up|down|both):)?(.*)$/i.exec(text)!;
        return { kind: 'resetAfter', direction: (m[1]?.toLowerCase() ?? 'both') as 'up' | 'down' | 'both', bytes: parseSize(flag, m[2]!) };
      }
      case '--blackhole':
        if (text !== '' && text !== 'hold' && text !== 'drop') throw new UsageError(`${flag}: expected hold or drop, got '${text}'`);
        return { kind: 'blackhole', mode: text === 'drop' ? 'drop' : 'hold' };
      case '--refuse':
        if (text !== '') throw new UsageError(`${flag}: takes only a window (e.g. --refuse @10s..20s), got '${text}'`);
        return { kind: 'refuse' };
      default:
        throw new Error(`unknown fault ${flag}`);
    }
  })();
  return { fault, window };
}

const FAULT_FLAGS = ['latency', 'bandwidth', 'reset-every', 'reset-after', 'blackhole', 'refuse'] as const;
/** Faults whose value may be left out (`--blackhole`, `--refuse`). */
const OPTIONAL_VALUE = new Set(['--blackhole', '--refuse']);

export function parseChaosArgs(argv: string[], random: () => number = Math.random): ChaosConfig | 'help' {
  // parseArgs has no optional values: give a bare --blackhole/--refuse an empty one.
  const args: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    args.push(arg);
    const next = argv[i + 1];
    if (OPTIONAL_VALUE.has(arg) && (next === undefined || next.startsWith('--') || next === '-h')) args.push('');
  }
  const parsed = parseFlags({
      args,
      allowPositionals: false,
      strict: true,
      options: {
        to: { type: 'string' },
        listen: { type: 'string' },
        duration: { type: 'string' },
        seed: { type: 'string' },
        json: { type: 'boolean' },
        quiet: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
        ...Object.fromEntries(FAULT_FLAGS.map((f) => [f, { type: 'string' as const, multiple: true as const }])),
      },
      tokens: true,
    });
  const v = parsed.values as Record<string, string | string[] | boolean | undefined>;
  if (v.help) return 'help';
  if (typeof v.to !== 'string') throw new UsageError('--to TARGET is required (e.g. --to ws://127.0.0.1:8765)');
  const target = parseAddress('--to', v.to, '127.0.0.1');
  const listen = typeof v.listen === 'string' ? parseAddress('--listen', v.listen, '127.0.0.1') : { host: '127.0.0.1', port: 0 };
  let seed = Math.floor(random() * 2 ** 31);
  if (typeof v.seed === 'string') {
    if (!/^\d+$/.test(v.seed)) throw new UsageError(`--seed: expected a non-negative integer, got '${v.seed}'`);
    seed = Number(v.seed);
  }
  // In the order given, so that the last one wins an overlap.
  const plan: ScheduledFault[] = [];
  for (const token of parsed.tokens ?? []) {
    if (token.kind !== 'option' || !(FAULT_FLAGS as readonly string[]).includes(token.name)) continue;
    plan.push(parseFault(`--${token.name}`, token.value ?? ''));
  }
  return {
    targetHost: target.host,
    targetPort: target.port,
    scheme: target.scheme,
    listenHost: listen.host,
    listenPort: listen.port,
    durationMs: typeof v.duration === 'string' ? parseDuration('--duration', v.duration) : undefined,
    seed,
    json: v.json === true,
    quiet: v.quiet === true,
    plan,
  };
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

export async function run(argv: string[]): Promise<void> {
  const config = parseOrReport('chaos', () => parseChaosArgs(argv));
  if (config === undefined) return;
  if (config === 'help') {
    printHelp(CHAOS_USAGE);
    return;
  }
  const write = (line: string) => process.stderr.write(config.json ? `${line}\n` : `tether chaos ${line}\n`);
  let proxy: ChaosProxy;
  try {
    proxy = await ChaosProxy.start({
      targetHost: config.targetHost,
      targetPort: config.targetPort,
      listenHost: config.listenHost,
      listenPort: config.listenPort,
      random: seededRandom(config.seed),
    });
  } catch (err) {
    process.stderr.write(`tether chaos: cannot listen on ${config.listenHost}:${config.listenPort}: ${(err as Error).message}\n`);
    process.exitCode = 1;
    return;
  }
  const host = proxy.host.includes(':') ? `[${proxy.host}]` : proxy.host;
  const target = config.targetHost.includes(':') ? `[${config.targetHost}]` : config.targetHost;
  process.stdout.write(`${config.scheme ? `${config.scheme}://` : ''}${host}:${proxy.port}\n`);
  if (!LOOPBACK.has(config.listenHost)) {
    process.stderr.write(`tether chaos: warning: listening on ${config.listenHost}: anyone who can reach it reaches ${target}:${config.targetPort} through it\n`);
  }
  const startLine = `${host}:${proxy.port} -> ${target}:${config.targetPort} (seed ${config.seed})`;
  write(config.json ? JSON.stringify({ t: 0, event: 'start', listen: `${host}:${proxy.port}`, target: `${target}:${config.targetPort}`, seed: config.seed }) : `+0.000s proxying ${startLine}`);
  const detach = attachLog(proxy, write, { json: config.json, quiet: config.quiet });
  const plan = new ChaosPlan(proxy, config.plan);
  plan.start();

  const reason = await new Promise<string>((resolve) => {
    const done = (why: string) => {
      clearTimeout(timer);
      process.off('SIGINT', done);
      process.off('SIGTERM', done);
      resolve(why);
    };
    const timer = config.durationMs === undefined ? undefined : setTimeout(() => done('duration reached'), config.durationMs);
    process.on('SIGINT', done);
    process.on('SIGTERM', done);
  });
  plan.stop();
  await proxy.close();
  detach();
  const stats = proxy.stats();
  if (config.json) write(JSON.stringify({ event: 'stats', reason, seed: config.seed, ...stats }));
  else for (const line of [`stopped (${reason}), seed ${config.seed}`, ...formatStats(stats)]) write(line);
}
