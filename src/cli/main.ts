/**
 * `tether <command>`: each subcommand lives in its own module and is loaded on demand, so
 * `tether exec` does not pay for the server's or the gateway's imports, and vice versa.
 */
import { readFileSync } from 'node:fs';
import { printHelp, reportUsageError } from './usage.js';

interface Command {
  summary: string;
  load: () => Promise<{ run(argv: string[]): Promise<void> }>;
}

const commands: Record<string, Command> = {
  serve: { summary: 'run the exec-server (WebSocket, Codex-compatible)', load: () => import('./serve/serve.js') },
  exec: { summary: 'run a command on a tether server, surviving drops', load: () => import('./exec.js') },
  cp: { summary: 'copy files and directories to or from a tether host, surviving drops', load: () => import('./cp.js') },
  mcp: { summary: 'stdio MCP bridge to a remote stdio MCP server', load: () => import('./mcp.js') },
  gateway: { summary: 'aggregating MCP gateway with health checks and reconnects', load: () => import('./gateway.js') },
  relay: { summary: 'a local exec-server whose sessions survive a flaky link upstream', load: () => import('./relay.js') },
  attach: { summary: 'follow (or watch) a process left running by tether exec --detach', load: () => import('./attach/attach.js') },
  ps: { summary: 'list the sessions and processes on a tether server', load: () => import('./ps.js') },
  chaos: { summary: 'a flaky-link proxy for testing (resets, latency, bandwidth, black holes)', load: () => import('./chaos.js') },
};

export function usage(): string {
  const lines = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(8)} ${c.summary}`);
  return [
    'usage: tether <command> [options]',
    '',
    'commands:',
    ...lines,
    '',
    "run 'tether <command> --help' (or 'tether help <command>') for a command's options;",
    "'tether --version' for the version",
  ].join('\n');
}

/** The package's version (package.json sits two levels up from src/cli, dist/cli and dist/bundle alike). */
export function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

export async function main(argv: string[]): Promise<void> {
  const [name, ...rest] = argv;
  switch (name) {
    case undefined:
      // Not an error to be curious, but not a success either: the list, on stderr.
      process.stderr.write(`${usage()}\n`);
      process.exitCode = 2;
      return;
    case '--help':
    case '-h':
      printHelp(usage());
      return;
    case '--version':
    case '-V':
    case '-v':
      process.stdout.write(`tether ${version()} (native: ${(await import('../server/native/index.js')).nativeSummary()})\n`);
      return;
    case 'help': {
      const [topic, ...extra] = rest;
      if (topic === undefined || topic === 'help') return printHelp(usage());
      if (extra.length > 0) return reportUsageError(undefined, `help takes one command, got '${rest.join(' ')}'`);
      const command = commands[topic];
      if (!command) return reportUsageError(undefined, `no command '${topic}' (commands: ${Object.keys(commands).join(', ')})`);
      return (await command.load()).run(['--help']);
    }
  }
  const command = commands[name];
  if (!command) {
    const hint = name.startsWith('-') ? `unknown option '${name}'` : `unknown command '${name}' (commands: ${Object.keys(commands).join(', ')})`;
    return reportUsageError(undefined, hint);
  }
  await (await command.load()).run(rest);
}
