#!/usr/bin/env node
/**
 * The repository root's `prepack`: `npm pack` and `npm publish` run from a clone would ship the
 * clone's package.json (its install script, whose scripts/ is not packed, and its
 * devDependencies) without the prebuilds, a package that cannot be installed. They stop here
 * with one line naming what makes the package instead: `npm run pack` (scripts/pack.mjs, whose
 * staged package.json has no prepack), then `npm publish` of the tarball it writes.
 *
 * Why not build the package here and rewrite package.json for the length of the pack: `npm
 * publish` reads package.json again after `postpack` and sends that to the registry, so the
 * registry would describe the clone's manifest (an install script) while the tarball holds
 * another; and a half-finished rewrite would be left in the clone.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..');
const { name, version } = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
const verb = process.env.npm_command === 'publish' ? 'npm publish' : 'npm pack';
process.stderr.write(
  `${name}: ${verb} from the repository root would ship a package that cannot be installed: run 'npm run pack' (then 'npm publish ./${name}-${version}.tgz')\n`,
);
process.exit(1);
