/**
 * `tether attach` in a real terminal (tmux), on a tty process left by `tether exec --detach
 * --tty`: raw keys (Ctrl-C reaches the remote shell's foreground job, not tether), the
 * remote terminal takes this one's size, `~.` typed after a newline detaches (exit 0,
 * "detached from …") and the shell runs on for the next attach; SIGHUP detaches too.
 */
import { describe, expect, it } from 'vitest';
import { runTether, spawnTether } from '../helpers/cli.js';
import { TETHER_BIN } from '../helpers/serve-process.js';
import { processesWithMarker } from '../helpers/server-process.js';
import { shellCommand, tmuxAndServer } from '../helpers/tmux.js';

describe('tether attach in a real terminal (tmux)', () => {
  const bed = tmuxAndServer(`tether-attach-test-${process.pid}`);
  const { tmux } = bed;

  it('bash -i detached: raw keys and size; ~. after a newline detaches, exit 0; the shell runs on, and the next attach finds its history', async () => {
    // An interactive bash without rc files: its prompt is `bash-N.N# ` (or `$ `), its history in memory.
    const started = await runTether(['exec', '--url', bed.server.url, '--detach', '--tty', '--name', 'term', '--', 'bash', '--norc', '--noprofile', '-i']);
    expect(started.code, started.stderr).toBe(0);
    const attachCommand = shellCommand([process.execPath, TETHER_BIN, 'attach', '--url', bed.server.url, 'term']);
    // The pane outlives tether attach, to show how it ended.
    tmux('new-session', '-d', '-s', 'a1', '-x', '150', '-y', '40', `sh -c "${attachCommand.replace(/"/g, '\\"')}; echo attach-exit=\\$?; sleep 600"`);
    const screen = () => tmux('capture-pane', '-p', '-t', 'a1');
    await expect.poll(screen, { timeout: 30_000 }).toMatch(/[$#] ?$/m);
    tmux('send-keys', '-t', 'a1', 'stty size', 'Enter');
    await expect.poll(screen, { timeout: 10_000 }).toMatch(/^40 150$/m);
    // Ctrl-C is a key for the remote terminal: it interrupts the remote sleep, not tether.
    const nap = `${300 + Math.floor(Math.random() * 100_000)}`;
    tmux('send-keys', '-t', 'a1', `sleep ${nap}`, 'Enter');
    // By events: the remote sleep runs, then the interrupt; an interrupt flushes what was typed
    // ahead (the terminal's line discipline), so the next line waits for the shell's new prompt.
    await expect.poll(() => processesWithMarker(nap, 'sleep').length, { timeout: 10_000 }).toBe(1);
    tmux('send-keys', '-t', 'a1', 'C-c');
    await expect.poll(() => processesWithMarker(nap, 'sleep').length, { timeout: 10_000 }).toBe(0);
    await expect.poll(screen, { timeout: 10_000 }).toMatch(/\^C\s*\n\S*[$#] ?$/m);
    tmux('send-keys', '-t', 'a1', 'echo after-int-$((6*7))', 'Enter');
    await expect.poll(screen, { timeout: 10_000 }).toMatch(/after-int-42$/m);
    // A ~ in the middle of a line is a key like any other.
    tmux('send-keys', '-t', 'a1', 'echo x~.y', 'Enter');
    await expect.poll(screen, { timeout: 10_000 }).toMatch(/^x~\.y$/m);
    tmux('send-keys', '-t', 'a1', '~.');
    await expect.poll(screen, { timeout: 10_000 }).toMatch(/detached from term \(it runs on: tether attach term to follow it again\)/);
    await expect.poll(screen, { timeout: 10_000 }).toMatch(/^attach-exit=0$/m);

    // The shell ran on: a new attach reaches it, and its exit is the attach's.
    tmux('new-session', '-d', '-s', 'a2', '-x', '100', '-y', '30', `sh -c "${attachCommand.replace(/"/g, '\\"')}; echo attach-exit=\\$?; sleep 600"`);
    const screen2 = () => tmux('capture-pane', '-p', '-t', 'a2');
    tmux('send-keys', '-t', 'a2', 'clear; stty size', 'Enter');
    await expect.poll(screen2, { timeout: 30_000 }).toMatch(/^30 100$/m);
    // The same shell: the history typed in the first attach is there.
    tmux('send-keys', '-t', 'a2', 'history', 'Enter');
    await expect.poll(screen2, { timeout: 10_000 }).toMatch(/^\s*\d+\s+echo x~\.y$/m);
    tmux('send-keys', '-t', 'a2', 'exit 5', 'Enter');
    await expect.poll(screen2, { timeout: 10_000 }).toMatch(/^attach-exit=5$/m);
  }, 120_000);

  it('SIGHUP detaches: exit 0, and the process runs on', async () => {
    const started = await runTether(['exec', '--url', bed.server.url, '--detach', '--name', 'hup', '--', 'cat']);
    expect(started.code, started.stderr).toBe(0);
    const first = spawnTether(['attach', '--url', bed.server.url, 'hup'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    first.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    first.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    first.stdin!.write('one\n');
    await expect.poll(() => out, { timeout: 15_000 }).toBe('one\n');
    const code = new Promise<number | null>((resolve) => first.once('close', (c) => resolve(c)));
    first.kill('SIGHUP');
    expect(await code).toBe(0);
    expect(err).toMatch(/^tether attach: detached from hup \(it runs on: tether attach hup to follow it again\)\n$/);
    // cat still runs: the next writer's line comes back, and its EOF ends it (exit 0).
    const second = await runTether(['attach', '--url', bed.server.url, 'hup'], { input: 'two\n' });
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toBe('two\n');
  }, 60_000);
});
