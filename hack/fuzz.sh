#!/usr/bin/env bash
# Runs every fuzz target of the module for FUZZTIME each (default 1m; make test runs a short
# budget, `make fuzz` the long one). Targets are found by name (func FuzzX in *_test.go), so a
# new one runs without being listed here. A failure leaves its input under the package's
# testdata/fuzz/<target>/ for `go test` to replay as a regression seed; commit it with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-1m}
status=0
while IFS= read -r file; do
  dir=$(dirname "$file")
  for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
    echo "fuzz: ./$dir $target for $FUZZTIME"
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "./$dir" >"${TMPDIR:-/tmp}/fuzz-$target.log" 2>&1; then
      cat "${TMPDIR:-/tmp}/fuzz-$target.log"
      echo "fuzz: $target FAILED (the input is under ./$dir/testdata/fuzz/$target)"
      status=1
    else
      tail -n 1 "${TMPDIR:-/tmp}/fuzz-$target.log"
    fi
  done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./.cache/' | sed 's#^\./##' | sort)
exit $status
