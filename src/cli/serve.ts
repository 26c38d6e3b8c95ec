export async function run(_argv: string[]): Promise<void> {
  process.stderr.write('tether serve: not implemented yet\n');
  process.exitCode = 2;
}
