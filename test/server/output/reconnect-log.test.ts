/**
 * A reconnect is one info line on the server: the resume, saying how long the session was
 * detached. The detach itself is logged at debug, so a session on a flaky link does not log
 * two info lines per drop. Five cuts through a chaos proxy, each waited for by the client's
 * 'recovered' event (the server logs the resume before it answers it).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { ChaosProxy } from '../../../src/chaos/proxy.js';
import { ExecClient } from '../../../src/client/index.js';
import { startServer, type TetherServer } from '../../../src/server/index.js';

const lines: { level: string; message: string }[] = [];
let server: TetherServer | undefined;
let proxy: ChaosProxy | undefined;

afterAll(async () => {
  await proxy?.close();
  await server?.close();
});

describe('the server log of a session that reconnects', () => {
  it('says one info line per reconnect, with the time detached; the detach at debug', async () => {
    server = await startServer({ port: 0, logger: (level, message) => lines.push({ level, message }) });
    proxy = await ChaosProxy.inFrontOf(server.url);
    const client = await ExecClient.connect(proxy.url, { clientName: 'flaky' });
    const short = client.sessionId.slice(0, 8);
    const CUTS = 5;
    for (let i = 0; i < CUTS; i++) {
      const recovered = new Promise((resolve) => client.once('recovered', resolve));
      proxy.cutAll();
      await recovered;
    }
    await client.close();
    const about = (level: string) => lines.filter((l) => l.level === level && l.message.includes(`session ${short}`)).map((l) => l.message);
    const info = about('info');
    expect(info[0]).toMatch(/ created for /);
    const resumes = info.filter((m) => m.includes(' resumed by '));
    expect(resumes).toHaveLength(CUTS);
    for (const m of resumes) expect(m).toMatch(/^session \S+ resumed by \S+ \(client flaky\) after \d+ ms detached$/);
    // Nothing else per reconnect: created, the resumes, and the end of the session.
    expect(info.filter((m) => !m.includes(' resumed by ') && !/ created for | closed by its client| expired;/.test(m))).toEqual([]);
    expect(about('debug').filter((m) => m.includes(' detached; expires in '))).toHaveLength(CUTS);
  });
});
