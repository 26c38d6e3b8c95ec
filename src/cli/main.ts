/**
 * `tether <command>`: each subcommand lives in its own module and is loaded on demand, so
 * `tether mcp` does not pay for the gateway's imports and vice versa.
 */
const commands: Record<string, { summary: string; load: () => Promise<{ run(argv: string[]): Promise<void> }> }> = {
  serve: { summary: 'run the exec-server (WebSocket, Codex-compatible)', load: () => import('./serve.js') },
  exec: { summary: 'run a command on a tether server, surviving drops', load: () => import('./exec.js') },
  cp: { summary: 'copy files and directories to or from a tether host, surviving drops', load: () => import('./cp.js') },
  mcp: { summary: 'stdio MCP bridge to a remote stdio MCP server', load: () => import('./mcp.js') },
  gateway: { summary: 'aggregating MCP gateway with health checks and reconnects', load: () => import('./gateway.js') },
  ps: { summary: 'list the sessions and processes on a tether server', load: () => import('./ps.js') },
  chaos: { summary: 'a flaky-link proxy for testing (resets, latency, bandwidth, black holes)', load: () => import('./chaos.js') },
};

export function usage(): string {
  const lines = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(8)} ${c.summary}`);
  return ['usage: tether <command> [options]', '', 'commands:', ...lines, '', "run 'tether <command> --help' for a command's options"].join('\n');
}

export async function main(argv: string[]): Promise<void> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    process.stderr.write(usage() + '\n');
    process.exitCode = name ? 0 : 2;
    return;
  }
  const command = commands[name];
  if (!command) {
    process.stderr.write(`tether: unknown command '${name}'\n\n${usage()}\n`);
    process.exitCode = 2;
    return;
  }
  const mod = await command.load();
  await mod.run(rest);
}
