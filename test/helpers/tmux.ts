/**
 * A real terminal for the CLI tests: a tmux server of the file's own (`tmux -L socket`) and an
 * in-process tether server, both ready before the file's tests (failing, not skipping, without
 * tmux) and gone after them, tmux first.
 */
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll } from 'vitest';
import { startServer, type TetherServer } from '../../src/server/index.js';
import { requireProgram } from './prerequisites.js';

export interface TmuxBed {
  /** Runs `tmux -L socket ARGS`; its stdout. */
  tmux(...args: string[]): string;
  /** The tether server (once the file's beforeAll ran). */
  readonly server: TetherServer;
}

/** Call inside the describe whose tests use it. */
export function tmuxAndServer(socket: string): TmuxBed {
  const tmux = (...args: string[]) => execFileSync('tmux', ['-L', socket, ...args], { encoding: 'utf8' });
  let server: TetherServer | undefined;

  beforeAll(async () => {
    requireProgram('tmux');
    server = await startServer({ port: 0 });
  });

  afterAll(async () => {
    try {
      tmux('kill-server');
    } catch {
      /* already gone */
    }
    await server?.close();
  });

  return {
    tmux,
    get server() {
      if (!server) throw new Error('the tether server is not started yet');
      return server;
    },
  };
}

/** `argv` as one command line for a tmux pane's shell (single-quoted words). */
export const shellCommand = (argv: string[]): string => argv.map((a) => `'${a}'`).join(' ');
