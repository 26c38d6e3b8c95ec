/** The descriptor budget's arithmetic (the end-to-end check is in server-liveness.test.ts). */
import { describe, expect, it } from 'vitest';
import { defaultMaxConnections, defaultMaxHttpSockets, defaultMaxHttpSocketsPerSession, DESCRIPTORS_PER_START, DESCRIPTORS_RESERVED, DescriptorBudget } from '../../../../src/server/memory/descriptors.js';

describe('descriptor budget', () => {
  it('gives connections a quarter of the limit, at least 1 and at most 10000', () => {
    expect(defaultMaxConnections(20_000)).toBe(5000);
    expect(defaultMaxConnections(128)).toBe(32);
    expect(defaultMaxConnections(2)).toBe(1);
    expect(defaultMaxConnections(1 << 20)).toBe(10_000);
  });

  it('admits starts while open + promised sockets + starts under way fit, counting the starts not finished yet', () => {
    let open = 100;
    const budget = new DescriptorBudget(100 + 10 + 2 * DESCRIPTORS_PER_START + DESCRIPTORS_RESERVED, () => 10, () => open);
    expect(budget.admitStart()).toBeNull();
    expect(budget.admitStart()).toBeNull();
    expect(budget.admitStart()).toMatch(/too many open descriptors: 100 of the server's limit of \d+ are in use and 10 are kept for connections/);
    budget.startDone(); // one start finished: its descriptors now count as open
    open += 4;
    expect(budget.admitStart()).toMatch(/too many open descriptors/);
    open -= 8; // processes ended
    expect(budget.admitStart()).toBeNull();
  });

  it('sets a sixteenth of the limit aside for outgoing http/request sockets (4..1024), a quarter of them per session (1..32)', () => {
    expect(defaultMaxHttpSockets(256)).toBe(16);
    expect(defaultMaxHttpSockets(16)).toBe(4);
    expect(defaultMaxHttpSockets(1 << 20)).toBe(1024);
    expect(defaultMaxHttpSocketsPerSession(16)).toBe(4);
    expect(defaultMaxHttpSocketsPerSession(4)).toBe(1);
    expect(defaultMaxHttpSocketsPerSession(1024)).toBe(32);
  });

  it('admits everything where descriptors cannot be counted', () => {
    expect(new DescriptorBudget(10, () => 1000, () => null).admitStart()).toBeNull();
  });
});
