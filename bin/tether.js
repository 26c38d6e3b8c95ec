#!/usr/bin/env node
// The `tether` command: the CLI bundled into dist/bundle/ (built by `npm run build`, which
// `npm install` runs in a clone through `prepare`; the published package ships it built).
let main;
try {
  ({ main } = await import('../dist/bundle/main.js'));
} catch (err) {
  if (err?.code !== 'ERR_MODULE_NOT_FOUND' || !/^Cannot find module '[^']*\/dist\/bundle\/main\.js'/.test(String(err.message))) throw err;
  process.stderr.write("tether: dist/ is not built: run 'npm run build' (or 'npm install') in this checkout\n");
  process.exit(1);
}
await main(process.argv.slice(2));
