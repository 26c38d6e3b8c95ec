/** tether-only: the envPolicy rules of docs/protocol.md ("process/start"), step by step. */
import { describe, expect, it } from 'vitest';
import { EnvPolicySchema } from '../../../../src/protocol/index.js';
import { buildChildEnv } from '../../../../src/server/local/env.js';

const serverEnv = {
  HOME: '/home/me',
  PATH: '/usr/bin',
  USER: 'me',
  AWS_SECRET_ACCESS_KEY: 's',
  GITHUB_TOKEN: 't',
  my_api_key: 'k',
  EDITOR: 'vi',
  LANG: 'C.UTF-8',
};
const policy = (p: object) => EnvPolicySchema.parse(p);

describe('buildChildEnv', () => {
  it('is exactly env without a policy', () => {
    expect(buildChildEnv({ A: '1' }, null, serverEnv)).toEqual({ A: '1' });
    expect(buildChildEnv({}, undefined, serverEnv)).toEqual({});
  });

  it('inherit all drops *KEY*/*SECRET*/*TOKEN* (any case) unless ignoreDefaultExcludes', () => {
    expect(buildChildEnv({}, policy({ inherit: 'all' }), serverEnv)).toEqual({
      HOME: '/home/me',
      PATH: '/usr/bin',
      USER: 'me',
      EDITOR: 'vi',
      LANG: 'C.UTF-8',
    });
    expect(buildChildEnv({}, policy({ inherit: 'all', ignoreDefaultExcludes: true }), serverEnv)).toEqual(serverEnv);
  });

  it('inherit core keeps the core names only; none starts empty', () => {
    expect(buildChildEnv({}, policy({ inherit: 'core' }), serverEnv)).toEqual({ HOME: '/home/me', PATH: '/usr/bin', USER: 'me', LANG: 'C.UTF-8' });
    expect(buildChildEnv({}, policy({ inherit: 'none' }), serverEnv)).toEqual({});
  });

  it('applies exclude, then set, then includeOnly, then lays env over the result', () => {
    const result = buildChildEnv(
      { USER: 'overlay', EXTRA: 'x' },
      policy({ inherit: 'all', exclude: ['ed*'], set: { SET_ME: '1', PATH: '/opt/bin' }, includeOnly: ['P*', 'set_*', 'editor'] }),
      serverEnv,
    );
    expect(result).toEqual({ PATH: '/opt/bin', SET_ME: '1', USER: 'overlay', EXTRA: 'x' });
  });

  it('treats glob metacharacters other than * literally', () => {
    expect(buildChildEnv({}, policy({ inherit: 'all', ignoreDefaultExcludes: true, includeOnly: ['A.B'] }), { A_B: '1', 'A.B': '2' })).toEqual({ 'A.B': '2' });
  });
});
