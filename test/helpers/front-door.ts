/**
 * A front door for the fleet tests: nginx or HAProxy from the Debian packages, run from a
 * directory of its own (prefix, pid file, logs, certificates), on a free loopback port, with
 * the config shipped in deploy/ and shown in docs/fleet.md. The shipped file is used as is,
 * except for the addresses and paths a test must choose, each replaced where it occurs
 * exactly once (so a changed file fails loudly here rather than being tested half).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventually } from './server-process.js';

export const REPO = join(import.meta.dirname, '..', '..');

/** A deploy/ file's text, as shipped. */
export function deployFile(name: string): string {
  return readFileSync(join(REPO, 'deploy', name), 'utf8');
}

/** Whether docs/fleet.md shows `text` whole, as one fenced block. */
export function fleetDocShows(text: string): boolean {
  const doc = readFileSync(join(REPO, 'docs', 'fleet.md'), 'utf8');
  return doc.includes('```text\n' + text + '```\n');
}

/** `text` with each `from` replaced by its `to`; each `from` must occur exactly once. */
export function substitute(text: string, replacements: [string, string][]): string {
  let out = text;
  for (const [from, to] of replacements) {
    const count = out.split(from).length - 1;
    if (count !== 1) throw new Error(`the shipped config holds ${JSON.stringify(from)} ${count} times, not once: the test no longer matches it`);
    out = out.replace(from, () => to);
  }
  return out;
}

/** A scratch directory every user can traverse (a root nginx's workers run as nobody). */
export function frontDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  chmodSync(dir, 0o755);
  return dir;
}

/** A CA, and a certificate it signs for 127.0.0.1 and localhost (EC P-256, one day), in `dir`. */
export function makeFrontCertificates(dir: string): { ca: string; cert: string; key: string; bundle: string } {
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  ssl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=tether fleet test CA');
  ssl('req', ...ec, '-keyout', 'front.key', '-out', 'front.csr', '-subj', '/CN=127.0.0.1');
  writeFileSync(join(dir, 'ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  ssl('x509', '-req', '-in', 'front.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'front.pem', '-days', '1', '-extfile', 'ext');
  // HAProxy wants the chain and the key in one file.
  writeFileSync(join(dir, 'front.bundle.pem'), readFileSync(join(dir, 'front.pem'), 'utf8') + readFileSync(join(dir, 'front.key'), 'utf8'));
  return { ca: join(dir, 'ca.pem'), cert: join(dir, 'front.pem'), key: join(dir, 'front.key'), bundle: join(dir, 'front.bundle.pem') };
}

export interface FrontDoor {
  /** The master's pid. */
  pid: number;
  /** Tells the proxy to reload its config the way its manual says; resolves once the command returned. */
  reload(): Promise<void>;
  /**
   * Everything the proxy logged so far (nginx: its error log; HAProxy: its output), whole, so
   * events can be counted in it (a tail would drop old lines and stop a count from growing).
   */
  log(): string;
  /** Kills the proxy (and its workers) and removes nothing: the caller owns `dir`. */
  stop(): Promise<void>;
}

/** Resolves once `https://127.0.0.1:port/` answers anything over TLS (the proxy is listening). */
async function listening(port: number, child: ChildProcess, log: () => string): Promise<void> {
  const up = await eventually(() => {
    if (child.exitCode !== null || child.signalCode !== null) return true;
    try {
      execFileSync('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, '-brief'], { input: '', stdio: ['pipe', 'ignore', 'ignore'], timeout: 5000 });
      return true;
    } catch {
      return false;
    }
  }, 20_000, 100);
  if (!up || child.exitCode !== null || child.signalCode !== null) throw new Error(`the proxy is not listening on ${port}: ${log()}`);
}

function stopper(child: ChildProcess, exited: Promise<unknown>): () => Promise<void> {
  return async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
  };
}

/**
 * nginx in the foreground (`daemon off`, so its master is our child) from `dir`, with
 * `siteConfig` (the shipped deploy/nginx/tether.conf, substituted) included in its http
 * block. `worker_shutdown_timeout` makes a reload cut the WebSockets the old workers hold,
 * as the docs advise (without it an old worker lives as long as its longest link).
 */
export async function startNginx(dir: string, port: number, siteConfig: string): Promise<FrontDoor> {
  mkdirSync(join(dir, 'logs'), { recursive: true });
  mkdirSync(join(dir, 'tmp'), { recursive: true });
  chmodSync(join(dir, 'tmp'), 0o777);
  writeFileSync(join(dir, 'tether.conf'), siteConfig);
  const conf = join(dir, 'nginx.conf');
  writeFileSync(
    conf,
    [
      'daemon off;',
      `pid ${join(dir, 'nginx.pid')};`,
      `error_log ${join(dir, 'logs', 'error.log')} info;`,
      'worker_processes 1;',
      'worker_shutdown_timeout 500ms;',
      'events { worker_connections 512; }',
      'http {',
      '  access_log off;',
      ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((t) => `  ${t}_temp_path ${join(dir, 'tmp', t)};`),
      `  include ${join(dir, 'tether.conf')};`,
      '}',
      '',
    ].join('\n'),
  );
  const log = () => {
    try {
      return readFileSync(join(dir, 'logs', 'error.log'), 'utf8');
    } catch {
      return '';
    }
  };
  const child = spawn('nginx', ['-p', dir, '-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const stop = await startedOrStopped(child, port, () => `${stderr}\n${log()}`);
  return {
    pid: child.pid!,
    reload: async () => {
      execFileSync('nginx', ['-p', dir, '-c', conf, '-s', 'reload'], { stdio: ['ignore', 'ignore', 'pipe'] });
    },
    log: () => `${stderr}\n${log()}`,
    stop,
  };
}

/**
 * The stop of `child` once it listens on `port`; if it never does, it is stopped and the
 * error (with `log()`) thrown.
 */
async function startedOrStopped(child: ChildProcess, port: number, log: () => string): Promise<() => Promise<void>> {
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const stop = stopper(child, exited);
  try {
    await listening(port, child, log);
  } catch (error) {
    await stop();
    throw error;
  }
  return stop;
}

/**
 * HAProxy in master-worker mode (`-W`, in the foreground), from `dir`, with `config` (the
 * shipped deploy/haproxy/tether.cfg, substituted). A reload is SIGUSR2 to the master: it
 * starts new workers on the same sockets and lets the old ones finish (hard-stop-after in
 * the shipped config bounds how long they hold a WebSocket).
 */
export async function startHaproxy(dir: string, port: number, config: string): Promise<FrontDoor> {
  const cfg = join(dir, 'haproxy.cfg');
  writeFileSync(cfg, config);
  const child = spawn('haproxy', ['-W', '-db', '-f', cfg, '-p', join(dir, 'haproxy.pid')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  const stop = await startedOrStopped(child, port, () => output);
  return {
    pid: child.pid!,
    reload: async () => {
      process.kill(child.pid!, 'SIGUSR2');
    },
    log: () => output,
    stop,
  };
}

export function removeFrontDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}
