export async function run(_argv: string[]): Promise<void> {
  process.stderr.write('tether exec: not implemented yet\n');
  process.exitCode = 2;
}
