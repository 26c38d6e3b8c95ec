/** tether-only: the upgrade checks, header by header (docs/protocol.md, "Transport"). */
import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { AuthMessages, checkUpgrade, digest } from '../../../../src/server/edge/auth.js';

const req = (headers: Record<string, string>) => ({ headers }) as unknown as IncomingMessage;
const expected = digest('s3cret');
const none = new Set<string>();

describe('checkUpgrade', () => {
  it('accepts anything without an Origin when auth is off', () => {
    expect(checkUpgrade(req({}), null, none)).toMatchObject({ ok: true });
    expect(checkUpgrade(req({ authorization: 'Bearer whatever' }), null, none)).toMatchObject({ ok: true });
  });

  it('refuses any Origin (before auth) unless allow-listed', () => {
    expect(checkUpgrade(req({ origin: 'null' }), expected, none)).toEqual({ ok: false, status: 403, body: '' });
    expect(checkUpgrade(req({ origin: 'https://a', authorization: 'Bearer s3cret' }), expected, new Set(['https://a']))).toMatchObject({ ok: true });
  });

  it('distinguishes missing, malformed and wrong credentials', () => {
    expect(checkUpgrade(req({}), expected, none)).toEqual({ ok: false, status: 401, body: AuthMessages.missing });
    for (const h of ['Basic czNjcmV0', 'Bearer', 'Bearer ', 's3cret', 'Bearer a b']) {
      expect(checkUpgrade(req({ authorization: h }), expected, none)).toEqual({ ok: false, status: 401, body: AuthMessages.badHeader });
    }
    expect(checkUpgrade(req({ authorization: 'Bearer s3cre' }), expected, none)).toEqual({ ok: false, status: 401, body: AuthMessages.invalid });
    expect(checkUpgrade(req({ authorization: 'Bearer s3cret-and-more' }), expected, none)).toEqual({ ok: false, status: 401, body: AuthMessages.invalid });
  });

  it('accepts the scheme in any case and returns the credential digest', () => {
    for (const h of ['Bearer s3cret', 'bearer s3cret', 'BEARER s3cret']) {
      const v = checkUpgrade(req({ authorization: h }), expected, none);
      expect(v.ok && v.credential.equals(expected)).toBe(true);
    }
  });
});

describe('checkUpgrade with several tokens and an admin token', () => {
  const alice = digest('alice');
  const bob = digest('bob');
  const root = digest('root');

  it('accepts each token as its own identity, and marks the admin token', () => {
    const as = (token: string) => checkUpgrade(req({ authorization: `Bearer ${token}` }), [alice, bob], none, root);
    expect(as('alice')).toEqual({ ok: true, credential: alice });
    expect(as('bob')).toEqual({ ok: true, credential: bob });
    expect(as('root')).toEqual({ ok: true, credential: root, admin: true });
    expect(as('mallory')).toEqual({ ok: false, status: 401, body: AuthMessages.invalid });
  });

  it('without user tokens, anyone gets in as the anonymous identity, the admin token as admin', () => {
    expect(checkUpgrade(req({}), null, none, root)).toEqual({ ok: true, credential: Buffer.alloc(0) });
    expect(checkUpgrade(req({ authorization: 'Bearer guess' }), null, none, root)).toEqual({ ok: true, credential: Buffer.alloc(0) });
    expect(checkUpgrade(req({ authorization: 'Bearer root' }), null, none, root)).toMatchObject({ ok: true, admin: true });
    // The Origin check comes first, admin or not.
    expect(checkUpgrade(req({ authorization: 'Bearer root', origin: 'https://x' }), null, none, root)).toMatchObject({ ok: false, status: 403 });
  });
});
