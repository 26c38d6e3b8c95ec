#!/bin/sh
# Prints -static when this machine can link a static C program (glibc's libc.a from
# libc6-dev, or musl), else nothing: a static keeper starts faster (no dynamic loader) and
# ignores LD_PRELOAD/LD_LIBRARY_PATH meant for the command. Run by binding.gyp at configure.
dir=$(mktemp -d 2>/dev/null) || exit 0
trap 'rm -rf "$dir"' EXIT
printf 'int main(void) { return 0; }\n' > "$dir/probe.c"
if ${CC:-cc} -static -o "$dir/probe" "$dir/probe.c" >/dev/null 2>&1 && "$dir/probe"; then
  echo -static
fi
