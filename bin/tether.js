#!/usr/bin/env node
// The `tether` command: the CLI bundled into dist/bundle/ (built by `npm run build`, which
// `npm install` runs in a clone through `prepare`; the published package ships it built).
import module from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';

// Node >= 22.1 keeps V8's compiled code of the bundle on disk: 5-15 % off `tether exec`'s
// start there (measured on Node 22.23, the exchange bench/start.ts times). It goes in the
// user's own cache directory, not the default under /tmp, where another user could plant code
// for a server run as root. A directory that cannot be made just means no cache;
// NODE_DISABLE_COMPILE_CACHE=1 turns it off. Node 20 has no compile cache.
try {
  module.enableCompileCache?.(join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'tether', 'compile-cache'));
} catch {
  // no cache
}

let main;
try {
  ({ main } = await import('../dist/bundle/main.js'));
} catch (err) {
  if (err?.code !== 'ERR_MODULE_NOT_FOUND' || !/^Cannot find module '[^']*\/dist\/bundle\/main\.js'/.test(String(err.message))) throw err;
  process.stderr.write("tether: dist/ is not built: run 'npm run build' (or 'npm install') in this checkout\n");
  process.exit(1);
}
await main(process.argv.slice(2));
