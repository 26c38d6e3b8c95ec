/**
 * The status page at / in a real headless browser (Chromium from the OS packages, driven by
 * playwright-core; .ci/run installs it): rows live through /events, a killed tether server
 * turns its row to `reconnecting` without a reload, the retry button brings it back; one
 * behind a plain TCP proxy (tether chaos, no fault) turns within 3 s when stopped. With
 * TETHER_SCREENSHOT=path the page is saved there (the README's docs/gateway-status.png).
 */
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { Gateway, parseConfig, startGatewayHttp, type GatewayHttp } from '../../../src/gateway/index.js';
import { everything, memoryServer, node, repoRoot } from '../../helpers/mcp-peers.js';
import { CHROMIUM, requireProgram } from '../../helpers/prerequisites.js';
import { startTetherServer, type TetherTarget } from '../../helpers/tether.js';
import { ChaosProxy } from '../../../src/chaos/proxy.js';
import { serverDiesSilently } from '../../helpers/silent-death.js';

// Without the background-networking flags Chromium dials out, which this network refuses.
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
describe('the status page in headless Chromium', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'tether-gw-page-'));
  const token = 'page-token-123';
  const memory = memoryServer();
  let tether: TetherTarget;
  let behindProxy: TetherTarget;
  let proxy: ChaosProxy;
  let gateway: Gateway;
  let http: GatewayHttp;
  let context: BrowserContext;
  let page: Page;

  beforeAll(async () => {
    // A missing browser is a failure that says how to install it, never a silent skip.
    requireProgram('chromium');
    tether = await startTetherServer({});
    behindProxy = await startTetherServer({});
    proxy = await ChaosProxy.start({ targetPort: behindProxy.server.port });
    gateway = new Gateway(
      parseConfig({
        // A long backoff: only the retry button brings the killed server back within the test.
        supervisor: { healthIntervalMs: 0, initialBackoffMs: 600_000 },
        mcpServers: {
          files: {
            command: node,
            args: [path.join(repoRoot, 'node_modules/@modelcontextprotocol/server-filesystem/dist/index.js'), dir],
            tether: { url: tether.url, recoveryDeadlineMs: 20_000 },
          },
          memory: { command: memory.command, args: memory.args, env: memory.env },
          everything: { command: everything.command, args: everything.args },
          proxied: { command: everything.command, args: everything.args, tether: { url: proxy.url, recoveryDeadlineMs: 60_000 } },
        },
      }),
    );
    http = await startGatewayHttp(gateway, { port: 0, token });
    await gateway.start();
    context = await chromium.launchPersistentContext(path.join(dir, 'profile'), { executablePath: CHROMIUM, headless: true, args: FLAGS, viewport: { width: 1280, height: 420 } });
    page = await context.newPage();
  }, 60_000);

  afterAll(async () => {
    await context?.close();
    await http?.close();
    await gateway?.close();
    await tether?.stop();
    await proxy?.close();
    await behindProxy?.stop();
    memory.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  const status = (server: string) => page.locator(`tr[data-server="${server}"] td[data-field="status"]`);

  it('asks for the token, trades it for a cookie, then shows one row per server', async () => {
    await page.goto(`${http.url}/`);
    await expect(page.locator('input[name="token"]').count()).resolves.toBe(1);
    await page.fill('input[name="token"]', token);
    await page.click('button');
    await page.waitForURL(`${http.url}/`);
    await status('files').filter({ hasText: 'connected' }).waitFor({ timeout: 10_000 });
    expect(await page.locator('tbody tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-server')))).toEqual(['files', 'memory', 'everything', 'proxied']);
    for (const s of ['files', 'memory', 'everything']) expect(await status(s).textContent()).toBe('connected');
    const cookies = await context.cookies();
    expect(cookies).toEqual([expect.objectContaining({ name: 'tether_gateway', httpOnly: true, sameSite: 'Strict' })]);
    expect(cookies[0]!.value).not.toContain(token);
  });

  it('a killed tether server turns its row to reconnecting without a reload; the retry button brings it back', async () => {
    await page.evaluate(() => ((globalThis as unknown as { marker: number }).marker = 42));
    const port = tether.server.port;
    await tether.stop();
    await status('files').filter({ hasText: 'reconnecting' }).waitFor({ timeout: 5000 });
    await page.locator('tr[data-server="files"] td[data-field="error"]').filter({ hasText: /\w/ }).waitFor({ timeout: 5000 });
    tether = await startTetherServer({ port });
    // The old session is gone on the new server: the entry waits for its (long) backoff.
    await page.locator('tr[data-server="files"] td[data-field="next"]').filter({ hasText: /in \d+ s/ }).waitFor({ timeout: 20_000 });
    expect(await status('files').textContent()).toBe('reconnecting');
    // Not connected: health is greyed out, never a green `healthy`.
    const health = page.locator('tr[data-server="files"] td[data-field="health"]');
    expect(await health.textContent()).toBe('—');
    expect(await health.getAttribute('class')).toBe('unknown');
    const shot = path.join(dir, 'gateway-status.png');
    await page.screenshot({ path: shot });
    if (process.env.TETHER_SCREENSHOT) copyFileSync(shot, path.resolve(repoRoot, process.env.TETHER_SCREENSHOT));

    await page.locator('tr[data-server="files"] button.retry').click();
    await status('files').filter({ hasText: 'connected' }).waitFor({ timeout: 15_000 });
    expect(await page.evaluate(() => (globalThis as unknown as { marker?: number }).marker)).toBe(42); // the same page, never reloaded
    expect(gateway.get('files')!.status).toBe('connected');
    // Back, the row keeps the last failure (greyed), with when it recovered and the restarts.
    await page.locator('tr[data-server="files"] td[data-field="error"].past').filter({ hasText: /^last failure at .*, recovered at .*, restarts 1: / }).waitFor({ timeout: 5000 });
  });

  it('behind a plain TCP proxy, the tether server dies silently: the row leaves connected within 3 s, health greyed', async () => {
    await status('proxied').filter({ hasText: 'connected' }).waitFor({ timeout: 15_000 });
    await serverDiesSilently(proxy);
    await status('proxied').filter({ hasText: 'reconnecting' }).waitFor({ timeout: 3000 });
    expect(await page.locator('tr[data-server="proxied"] td[data-field="health"]').textContent()).toBe('—');
    expect(await page.locator('tr[data-server="proxied"] td[data-field="error"]').textContent()).toMatch(/^the tether (server cannot be reached|link has been down)/);
  });
});
