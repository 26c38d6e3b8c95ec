/** summarizeStderr: the error lines of a failed server's stderr, bounded (issue 15). */
import { describe, expect, it } from 'vitest';
import { summarizeStderr } from '../../../src/supervisor/index.js';

describe('summarizeStderr', () => {
  it('Node: the thrown error, not the "Node.js v20" trailer nor the source excerpt', () => {
    const stderr = [
      '/srv/server.js:3',
      "  throw new Error('OPENAI_API_KEY is not set');",
      '  ^',
      '',
      'Error: OPENAI_API_KEY is not set',
      '    at Object.<anonymous> (/srv/server.js:3:9)',
      '    at Module._compile (node:internal/modules/cjs/loader:1554:14)',
      '',
      'Node.js v20.20.2',
      '',
    ].join('\n');
    expect(summarizeStderr(stderr)).toBe('Error: OPENAI_API_KEY is not set');
  });

  it('Node ESM: a missing package, with its code', () => {
    const stderr = "node:internal/modules/esm/resolve:873\n  throw new ERR_MODULE_NOT_FOUND(packageName, fileURLToPath(base), null);\n        ^\n\nError [ERR_MODULE_NOT_FOUND]: Cannot find package 'zod' imported from /srv/index.js\n    at packageResolve (node:internal/modules/esm/resolve:873:9) {\n  code: 'ERR_MODULE_NOT_FOUND'\n}\n\nNode.js v20.20.2\n";
    expect(summarizeStderr(stderr)).toBe("Error [ERR_MODULE_NOT_FOUND]: Cannot find package 'zod' imported from /srv/index.js");
  });

  it('Python: the exception after the traceback', () => {
    const stderr = 'Traceback (most recent call last):\n  File "/srv/server.py", line 1, in <module>\n    import mcp\nModuleNotFoundError: No module named \'mcp\'\n';
    expect(summarizeStderr(stderr)).toBe("ModuleNotFoundError: No module named 'mcp'");
  });

  it('several error lines: the first (the cause) and the last (the verdict)', () => {
    const stderr = 'info: starting\nerror: cannot open /data/db.sqlite: permission denied\nwarn: retrying\nfatal: giving up\n';
    expect(summarizeStderr(stderr)).toBe('error: cannot open /data/db.sqlite: permission denied | fatal: giving up');
  });

  it('no error line: the last lines; nothing: null; bounded', () => {
    expect(summarizeStderr('listening\nready\nbye\n')).toBe('ready | bye');
    expect(summarizeStderr('\n  \n')).toBeNull();
    expect(summarizeStderr(`Error: ${'x'.repeat(5000)}`)!.length).toBeLessThanOrEqual(600);
  });
});
