/** Placeholder until the recovery bench lands (needs src/client). */
export async function run(): Promise<void> {
  console.log('## Recovery: not measured yet\n');
}
