/** The `~.` detach escape of `tether attach` (src/cli/attach/detach-keys.ts): a pure state machine over typed bytes. */
import { describe, expect, it } from 'vitest';
import { DetachKeys } from '../../../src/cli/attach/detach-keys.js';

/** Feeds each piece in turn; returns what was forwarded (joined) and whether it detached. */
function typeInto(keys: DetachKeys, ...pieces: string[]): { forwarded: string; detach: boolean } {
  let forwarded = '';
  let detach = false;
  for (const piece of pieces) {
    const result = keys.feed(Buffer.from(piece, 'latin1'));
    forwarded += result.forward.toString('latin1');
    detach ||= result.detach;
  }
  return { forwarded, detach };
}

describe('DetachKeys', () => {
  it('detaches on ~. as the very first keys, forwarding nothing', () => {
    expect(typeInto(new DetachKeys(), '~.')).toEqual({ forwarded: '', detach: true });
  });

  it('detaches on ~. right after a newline (CR from a raw terminal, or LF), forwarding what came before', () => {
    expect(typeInto(new DetachKeys(), 'make test\r~.')).toEqual({ forwarded: 'make test\r', detach: true });
    expect(typeInto(new DetachKeys(), 'ls\n~.')).toEqual({ forwarded: 'ls\n', detach: true });
  });

  it('drops whatever follows ~. in the same read, and everything after', () => {
    const keys = new DetachKeys();
    expect(typeInto(keys, 'a\r~.rm -rf /\r')).toEqual({ forwarded: 'a\r', detach: true });
    expect(keys.detached).toBe(true);
    expect(typeInto(keys, 'more')).toEqual({ forwarded: '', detach: true });
  });

  it('works when the ~ and the . arrive in separate reads (one key per read, as typed)', () => {
    const keys = new DetachKeys();
    const first = typeInto(keys, 'x', '\r', '~');
    expect(first).toEqual({ forwarded: 'x\r', detach: false }); // the ~ is held
    expect(typeInto(keys, '.')).toEqual({ forwarded: '', detach: true });
  });

  it('forwards a ~ in the middle of a line at once, and ~. there is plain text', () => {
    expect(typeInto(new DetachKeys(), 'cd ~/src', '~.')).toEqual({ forwarded: 'cd ~/src~.', detach: false });
  });

  it('~~ at a line start sends one ~, and a following . is then plain text', () => {
    expect(typeInto(new DetachKeys(), '~~.')).toEqual({ forwarded: '~.', detach: false });
    expect(typeInto(new DetachKeys(), '\r~', '~', '.')).toEqual({ forwarded: '\r~.', detach: false });
  });

  it('a held ~ followed by any other key sends both, as typed', () => {
    expect(typeInto(new DetachKeys(), '~/bin/x\r')).toEqual({ forwarded: '~/bin/x\r', detach: false });
    expect(typeInto(new DetachKeys(), '~', 'a')).toEqual({ forwarded: '~a', detach: false });
  });

  it('a held ~ followed by a newline sends both, and the next line can detach', () => {
    expect(typeInto(new DetachKeys(), '~\r~.')).toEqual({ forwarded: '~\r', detach: true });
  });

  it('Ctrl-C and other control bytes pass through unchanged and in order', () => {
    const bytes = Buffer.from([0x03, 0x04, 0x1b, 0x5b, 0x41, 0x00, 0xff]);
    const result = new DetachKeys().feed(bytes);
    expect(result).toEqual({ forward: bytes, detach: false });
  });

  it('flush sends a held ~ at EOF and nothing otherwise', () => {
    const keys = new DetachKeys();
    expect(typeInto(keys, 'a\r~')).toEqual({ forwarded: 'a\r', detach: false });
    expect(keys.flush().toString()).toBe('~');
    expect(keys.flush().length).toBe(0);
  });

  it('does not depend on how reads cut the input (seeded, bounded): pieces give exactly what one read gives', () => {
    let seed = 12345;
    const next = () => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 16) & 0xff;
    const alphabet = [0x7e, 0x7e, 0x0d, 0x0a, 0x61, 0x2e, 0x03];
    let detaches = 0;
    for (let run = 0; run < 200; run++) {
      const input: number[] = [];
      for (let i = 0; i < 32; i++) input.push(alphabet[next() % alphabet.length]!);
      const keys = new DetachKeys();
      let forwarded = Buffer.alloc(0);
      let detached = false;
      for (let i = 0; i < input.length && !detached; ) {
        const n = 1 + (next() % 5);
        const r = keys.feed(Buffer.from(input.slice(i, i + n)));
        forwarded = Buffer.concat([forwarded, r.forward]);
        detached = r.detach;
        i += n;
      }
      const once = new DetachKeys();
      const whole = once.feed(Buffer.from(input));
      expect(detached).toBe(whole.detach);
      expect(Buffer.concat([forwarded, keys.flush()]).equals(Buffer.concat([whole.forward, once.flush()]))).toBe(true);
      // Without a detach, every byte but the escapes is forwarded: nothing is lost or added.
      if (!detached) expect(Buffer.concat([forwarded, keys.flush()]).length).toBeLessThanOrEqual(input.length);
      if (detached) detaches++;
    }
    expect(detaches).toBeGreaterThan(0);
    expect(detaches).toBeLessThan(200);
  });
});
