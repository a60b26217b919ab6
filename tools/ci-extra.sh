#!/usr/bin/env bash
# The robustness part of CI (DESIGN.md section 16), run by .ci/run after the main suite:
# the sanitizer build's unit and tiny-fixture MPI tests, 30 s per fuzz target, and the
# valgrind leak check. Each script installs what it needs (clang, valgrind) when missing.
# Prints how long each step took; stops at the first failure.
#   tools/ci-extra.sh
set -euo pipefail
cd "$(dirname "$0")/.."
step() {
  local t0=$SECONDS
  echo "== refit ci-extra: $*"
  "$@"
  echo "== refit ci-extra: $* done in $((SECONDS - t0)) s"
}
step tools/sanitize.sh
step tools/fuzz.sh 30
step tools/valgrind.sh
echo "refit ci-extra: ok"
