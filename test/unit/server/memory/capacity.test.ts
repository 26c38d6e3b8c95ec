/**
 * Limits derived from the machine (issue 13), on made-up machines: the memory budget's
 * default from RAM or the cgroup (v1 and v2, limits set on a parent), the process cap from
 * the descriptor limit and the process ids, the pty cap from kernel.pty.max less its reserve;
 * and the admission of process starts against them, with reasons that name the cap.
 */
import { describe, expect, it } from 'vitest';
import {
  deriveMaxProcesses,
  deriveMaxPtys,
  DESCRIPTORS_PER_PROCESS,
  ProcessCapacity,
  serverCapacity,
} from '../../../../src/server/memory/capacity.js';
import { cgroupMemoryLimit, defaultMemoryBudget, memoryLimit, pidLimit, ptyFacts, type FileReader } from '../../../../src/server/memory/machine.js';
import { MemoryBudget } from '../../../../src/server/memory/memory-budget.js';

const GiB = 1024 ** 3;
const machine = (files: Record<string, string>): FileReader => (path) => files[path] ?? null;

describe('memory limit and the default budget', () => {
  it('is the RAM when no cgroup limits memory (v1 writes 2^63 rounded to a page)', () => {
    const read = machine({
      '/proc/self/cgroup': '9:pids:/\n4:memory:/process_api/abc\n0::/\n',
      '/sys/fs/cgroup/memory/memory.limit_in_bytes': '9223372036854771712\n',
      '/sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes': '9223372036854771712\n',
    });
    expect(cgroupMemoryLimit(read)).toBeNull();
    expect(memoryLimit(read, 24 * GiB)).toEqual({ bytes: 24 * GiB, source: 'RAM' });
    expect(defaultMemoryBudget(memoryLimit(read, 24 * GiB))).toBe(GiB); // a quarter, at most 1 GiB
    expect(defaultMemoryBudget(memoryLimit(read, 2 * GiB))).toBe(GiB / 2);
  });

  it("takes a cgroup v1 limit set on a parent of this process's cgroup", () => {
    const read = machine({
      '/proc/self/cgroup': '4:memory:/team/job\n',
      '/sys/fs/cgroup/memory/team/memory.limit_in_bytes': String(2 * GiB),
      '/sys/fs/cgroup/memory/team/job/memory.limit_in_bytes': '9223372036854771712',
    });
    expect(memoryLimit(read, 24 * GiB)).toEqual({ bytes: 2 * GiB, source: 'cgroup' });
    expect(defaultMemoryBudget(memoryLimit(read, 24 * GiB))).toBe(GiB / 2);
  });

  it('takes a cgroup v2 memory.max ("max" is no limit), also at the mount root inside a container', () => {
    const v2 = machine({ '/proc/self/cgroup': '0::/user.slice/app\n', '/sys/fs/cgroup/user.slice/app/memory.max': '536870912\n', '/sys/fs/cgroup/user.slice/memory.max': 'max\n' });
    expect(memoryLimit(v2, 24 * GiB)).toEqual({ bytes: 512 * 1024 ** 2, source: 'cgroup' });
    expect(defaultMemoryBudget(memoryLimit(v2, 24 * GiB))).toBe(128 * 1024 ** 2);
    // A container sees its own cgroup at the mount's root; the path it is told does not exist there.
    const container = machine({ '/proc/self/cgroup': '0::/docker/0123\n', '/sys/fs/cgroup/memory.max': '1073741824\n' });
    expect(memoryLimit(container, 24 * GiB)).toEqual({ bytes: GiB, source: 'cgroup' });
  });

  it('is the RAM where there is no /proc (not Linux)', () => {
    expect(memoryLimit(machine({}), 8 * GiB)).toEqual({ bytes: 8 * GiB, source: 'RAM' });
  });
});

describe('the process and pty caps', () => {
  // fs: 2500 open files (an eighth) and 256 operations in flight.
  const here = { descriptorLimit: 20_000, maxConnections: 5000, filesDescriptors: 2756, pidLimit: 32_768, ptys: { max: 4096, reserve: 1024 } };

  it('derives the process cap from the descriptors left after connections, the server and files, at 4 per process', () => {
    expect(DESCRIPTORS_PER_PROCESS).toBe(4);
    const cap = deriveMaxProcesses(here);
    // 20000 - 5000 connections - 32 for the server - 2756 for files = 12212, / 4
    expect(cap.value).toBe(3053);
    expect(cap.origin).toBe('its descriptor limit of 20000 (RLIMIT_NOFILE) less 5000 for connections, 32 for itself and 2756 for files, at 4 per process');
    expect(deriveMaxProcesses({ ...here, descriptorLimit: 256, maxConnections: 64, filesDescriptors: 40 }).value).toBe(30);
    // Outgoing http/request sockets are set aside too: (256 - 64 - 32 - 40 - 16) / 4.
    const withHttp = deriveMaxProcesses({ ...here, descriptorLimit: 256, maxConnections: 64, filesDescriptors: 40, httpSockets: 16 });
    expect(withHttp.value).toBe(26);
    expect(withHttp.origin).toMatch(/32 for itself, 40 for files and 16 for outgoing http\/request sockets, at 4 per process/);
  });

  it('lets the process ids bind when they are scarcer (two tasks per process, three quarters of the machine)', () => {
    const cap = deriveMaxProcesses({ ...here, descriptorLimit: 1 << 20, maxConnections: 10_000, pidLimit: 4096 });
    expect(cap.value).toBe(1536);
    expect(cap.origin).toMatch(/4096 process ids/);
    expect(pidLimit(machine({ '/proc/sys/kernel/pid_max': '32768\n', '/proc/sys/kernel/threads-max': '192731\n' }))).toBe(32_768);
    const cgroupPids = machine({ '/proc/sys/kernel/pid_max': '32768', '/proc/self/cgroup': '8:pids:/job\n', '/sys/fs/cgroup/pids/job/pids.max': '1000', '/sys/fs/cgroup/pids/pids.max': 'max' });
    expect(pidLimit(cgroupPids)).toBe(1000);
  });

  it('derives the pty cap from kernel.pty.max less the reserve a container cannot use, at most the process cap', () => {
    expect(ptyFacts(machine({ '/proc/sys/kernel/pty/max': '4096\n', '/proc/sys/kernel/pty/reserve': '1024\n' }))).toEqual({ max: 4096, reserve: 1024 });
    expect(deriveMaxPtys(here, 5000)).toEqual({ value: 3072, origin: 'kernel.pty.max 4096 less kernel.pty.reserve 1024' });
    expect(deriveMaxPtys(here, 3053)).toEqual({ value: 3053, origin: 'the process cap' });
    expect(deriveMaxPtys(here, 100).value).toBe(100);
    expect(deriveMaxPtys({ ...here, ptys: null }, 100).value).toBe(100);
  });

  it('summarizes every limit and its origin for the start log', () => {
    const read = machine({ '/proc/sys/kernel/pty/max': '2048', '/proc/sys/kernel/pty/reserve': '1024', '/proc/sys/kernel/pid_max': '32768' });
    const { summary, memory, processes } = serverCapacity({ descriptorLimit: 20_000, maxConnections: 5000, filesDescriptors: 2756, read, ram: 24 * GiB });
    expect(memory.limit).toBe(GiB);
    expect(processes.maxProcesses).toBe(3053);
    expect(processes.maxPtys).toBe(1024);
    expect(summary).toMatch(/memory budget 1\.0GiB \(a quarter of the 24GiB of RAM, at most 1GiB\); 3053 processes .*; 1024 tty processes \(kernel.pty.max 2048 less kernel.pty.reserve 1024\)/);
    const configured = serverCapacity({ descriptorLimit: 20_000, maxConnections: 5000, filesDescriptors: 2756, read, ram: 24 * GiB, memoryBudgetBytes: 4 << 20, maxServerProcesses: 7, maxPtys: 3 });
    expect(configured.summary).toMatch(/memory budget 4\.0MiB \(--memory-budget\); 7 processes \(its configuration\); 3 tty processes/);
  });
});

describe('process admission', () => {
  const capacity = (over: { maxProcesses?: number; maxPtys?: number; inUse?: number; memory?: MemoryBudget } = {}) =>
    new ProcessCapacity({
      maxProcesses: { value: over.maxProcesses ?? 3, origin: 'its descriptor limit of 64' },
      maxPtys: { value: over.maxPtys ?? 2, origin: 'kernel.pty.max 8 less kernel.pty.reserve 6' },
      memory: over.memory ?? new MemoryBudget(1 << 20),
      machinePtys: () => ({ inUse: over.inUse ?? 0, usable: 2 }),
    });

  it('admits up to the process cap, refuses past it naming the cap and its origin, and admits again once one is gone', () => {
    const c = capacity();
    const tickets = [c.admit(false), c.admit(false), c.admit(false)].map((a) => ('ticket' in a ? a.ticket : null));
    expect(tickets.every(Boolean)).toBe(true);
    expect(c.live).toBe(3);
    const refused = c.admit(false);
    expect(refused).toEqual({ refusal: expect.stringMatching(/too many processes on this server: it runs at most 3 at once \(--max-server-processes; derived from its descriptor limit of 64\)/) });
    tickets[0]!();
    tickets[0]!(); // a ticket gives its room back once
    expect(c.live).toBe(2);
    expect('ticket' in c.admit(false)).toBe(true);
  });

  it('refuses a tty process past the pty cap, or when the machine has no pseudo-terminal left, but still admits pipes', () => {
    const c = capacity({ maxProcesses: 10 });
    expect('ticket' in c.admit(true)).toBe(true);
    expect('ticket' in c.admit(true)).toBe(true);
    expect(c.admit(true)).toEqual({ refusal: expect.stringMatching(/no pseudo-terminal for a tty process: this server runs at most 2 .*--max-ptys; derived from kernel.pty.max 8/) });
    expect('ticket' in c.admit(false)).toBe(true);
    const machineFull = capacity({ maxProcesses: 10, maxPtys: 10, inUse: 2 });
    expect(machineFull.admit(true)).toEqual({ refusal: expect.stringMatching(/the machine has 2 in use of the 2 it allows \(kernel.pty.nr/) });
  });

  it('refuses any start while the memory budget is spent, naming the budget', () => {
    const memory = new MemoryBudget(1000);
    const c = capacity({ memory });
    const input = memory.account('input');
    input.set(1000);
    expect(c.admit(false)).toEqual({ refusal: expect.stringMatching(/server memory budget exhausted: .* of the 1000B budget \(--memory-budget\)/) });
    input.set(999);
    expect('ticket' in c.admit(false)).toBe(true);
  });
});
