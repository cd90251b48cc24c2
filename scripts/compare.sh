#!/usr/bin/env bash
# Measures this checkout's relay against the one a git revision builds, run for run in
# alternating order (permission-bench --compare), e.g.
#   scripts/compare.sh main --families 100 --window 1
# The revision's tree is unpacked and built in release mode under .build/compare/ (kept, so
# that comparing against it again builds nothing). Options after the revision go to
# permission-bench; --runs is 5 unless given.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # the comment above, as help
    sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
    echo "usage: scripts/compare.sh REVISION [permission-bench options]" >&2
    exit 64
fi
rev=$(git rev-parse --verify --quiet "$1^{commit}") || { echo "compare: $1 is not a commit of this repository" >&2; exit 64; }
shift
tree=.build/compare/$rev
if [ ! -d "$tree" ]; then
    mkdir -p .build/compare
    unpacked=$(mktemp -d .build/compare/unpacking.XXXXXX)
    trap 'rm -rf "$unpacked"' EXIT
    git archive "$rev" | tar -x -C "$unpacked"
    mv "$unpacked" "$tree"
    trap - EXIT
fi
echo "building $rev in $tree…" >&2
(cd "$tree" && swift build -c release --product permission-relay >&2)
swift build -c release --product permission-relay >&2
swift build -c release --product permission-bench >&2
runs=(--runs 5)
for arg in "$@"; do [ "$arg" = --runs ] && runs=(); done
exec "$(swift build -c release --show-bin-path)/permission-bench" "${runs[@]}" \
    --compare "$(cd "$tree" && swift build -c release --show-bin-path)/permission-relay" "$@"
