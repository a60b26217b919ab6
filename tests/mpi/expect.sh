#!/usr/bin/env bash
# Runs a command and checks how it ended:  expect.sh ok|fail REGEX [REGEX...] -- CMD...
#   ok: exit 0 and every REGEX matches a line of the output; fail: exit non-zero and every
#   REGEX matches. Prints the output's tail either way, so ctest --output-on-failure shows it.
set -u
want=$1
shift
regexes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do regexes+=("$1"); shift; done
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out" | tail -n 40
if [ "$want" = ok ] && [ $rc -ne 0 ]; then echo "expect.sh: exit $rc, expected 0"; exit 1; fi
if [ "$want" = fail ] && [ $rc -eq 0 ]; then echo "expect.sh: exit 0, expected a failure"; exit 1; fi
for r in "${regexes[@]}"; do
  if ! printf '%s\n' "$out" | grep -Eq -- "$r"; then echo "expect.sh: output lacks /$r/"; exit 1; fi
done
echo "expect.sh: $want as expected (exit $rc)"
