#!/usr/bin/env node
// The `tether` command. Runs the TypeScript sources through tsx, so an install needs no
// build step and `npx tether`, `npm start` and MCP host configs all run the same code.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli/main.ts');
await main(process.argv.slice(2));
