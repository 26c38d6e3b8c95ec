// The shape of src/ (docs/architecture.md), checked by test/package/import-rules.test.ts with
// dependency-cruiser: no import circle anywhere (type-only imports included), the server's
// folders import one way only, each through the other's index.ts, and the relay reaches the
// server only through its back-end interface, its shared fs part and its public entry.

/** The server's folders, highest first: a folder imports only folders of a lower rank. */
const RANKS = [
  ['restart'],
  ['edge', 'methods'],
  ['local'],
  ['fs'],
  ['connection'],
  ['session'],
  ['output'],
  ['memory', 'backend', 'native'],
];

const layerRules = RANKS.flatMap((folders, rank) =>
  folders.map((folder) => ({
    name: `layers-${folder}`,
    severity: 'error',
    comment: `server/${folder}/ imports only the folders below it: ${RANKS.slice(rank + 1).flat().join(', ')}.`,
    from: { path: `^src/server/${folder}/` },
    to: {
      path: '^src/server/',
      pathNot: [`^src/server/${folder}/`, ...RANKS.slice(rank + 1).flat().map((lower) => `^src/server/${lower}/`)],
    },
  })),
);

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'No import circle anywhere in src/, type-only imports included.',
      from: { path: '^src/' },
      to: { circular: true },
    },
    ...layerRules,
    {
      name: 'server-folder-doors',
      severity: 'error',
      comment: "A server folder is entered through its index.ts only: another folder (or the server's top files) imports nothing else of it.",
      from: { path: '^src/server/([^/]+)/' },
      to: { path: '^src/server/([^/]+)/.+', pathNot: ['^src/server/$1/', '^src/server/[^/]+/index\\.ts$'] },
    },
    {
      name: 'server-top-through-doors',
      severity: 'error',
      comment: "The server's top files (server.ts, server-start.ts, …) reach its folders through their index.ts.",
      from: { path: '^src/server/[^/]+\\.ts$' },
      to: { path: '^src/server/[^/]+/.+', pathNot: ['^src/server/[^/]+/index\\.ts$'] },
    },
    {
      name: 'outside-through-server-doors',
      severity: 'error',
      comment: "Code outside src/server reaches it through its top files (the public entry, options, start) or a folder door.",
      from: { path: '^src/', pathNot: '^src/server/' },
      to: { path: '^src/server/[^/]+/.+', pathNot: ['^src/server/[^/]+/index\\.ts$'] },
    },
    {
      name: 'server-parts-not-top',
      severity: 'error',
      comment: "A server folder never imports the server's top files (its coordinator).",
      from: { path: '^src/server/[^/]+/' },
      to: { path: '^src/server/[^/]+\\.ts$' },
    },
    {
      name: 'relay-narrow',
      severity: 'error',
      comment: "The relay (another back-end) uses the server's back-end interface, its shared fs part and its public entry, nothing else.",
      from: { path: '^src/relay/' },
      to: { path: '^src/server/', pathNot: ['^src/server/index\\.ts$', '^src/server/backend/', '^src/server/fs/'] },
    },
    {
      name: 'output-session-no-sockets',
      severity: 'error',
      comment: 'The numbered output and the sessions know nothing of sockets.',
      from: { path: '^src/server/(output|session)/' },
      to: { path: '^(node:)?(net|tls|http|https|dgram)$|(^|/)node_modules/ws/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '^(test|bench|dist)/' },
  },
};
