#!/usr/bin/env bash
# Runs every fuzz target of the module's packages, one after the other, each
# for the given time (default 10s):  scripts/fuzz.sh 30s   (make fuzz FUZZTIME=30s)
# Plain `go test` already runs each target's seed corpus; this explores beyond it.
set -euo pipefail
fuzztime=${1:-10s}
cd "$(dirname "$0")/.."
found=0
while read -r dir pkg; do
  for name in $(grep -hoE '^func Fuzz[A-Za-z0-9_]*\(' "$dir"/*_test.go 2>/dev/null | sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(/\1/' | sort -u); do
    found=1
    echo "== $pkg $name ($fuzztime)"
    go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"
  done
done < <(go list -f '{{.Dir}} {{.ImportPath}}' ./...)
[ "$found" = 1 ] || echo "no fuzz targets found"
