#!/usr/bin/env bash
# Counts the relay's instructions per cycle with callgrind, which repeat from run to run
# where timings do not: `permission-bench core` drives the core and its store in-process
# (no sockets) for two run lengths, and the difference per cycle leaves out start-up and
# provisioning. Usage: scripts/profile-core.sh [F] [W]  (default 100 8). Needs valgrind.
# The C targets are built with DWARF 4 debug info: valgrind 3.19 cannot read clang's DWARF 5.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # the comment above, as help
    sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi
cd "$(dirname "$0")/.."
families=${1:-100}
window=${2:-8}
if ! [[ "$families" =~ ^[1-9][0-9]*$ && "$window" =~ ^[1-9][0-9]*$ ]] || [ $# -gt 2 ]; then
    echo "profile-core: usage: scripts/profile-core.sh [FAMILIES] [WINDOW], positive whole numbers (--help says more)" >&2
    exit 64
fi
command -v valgrind > /dev/null || { echo "valgrind is needed: apt-get install valgrind" >&2; exit 1; }
swift build -c release --scratch-path .build/profile -Xcc -gdwarf-4 --product permission-bench
bench=.build/profile/release/permission-bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for rounds in 5 15; do
    echo "callgrind over $rounds rounds of (F, W) = ($families, $window)…" >&2
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$rounds" "$bench" core \
        --families "$families" --window "$window" --rounds "$rounds" > /dev/null 2> "$out/log.$rounds" \
        || { cat "$out/log.$rounds" >&2; exit 1; }
done
short=$(awk '/^summary:/ {print $2}' "$out/cg.5")
long=$(awk '/^summary:/ {print $2}' "$out/cg.15")
echo "instructions per cycle (core, store and its writer thread): $(( (long - short) / (10 * families * window) ))"
echo "where they go (the longer run, inclusive, the relay's own functions):"
callgrind_annotate --inclusive=yes "$out/cg.15" 2> /dev/null | grep -E '^ *[0-9,]+ .*Sources/Relay' \
    | sed -E 's/ \[[^]]*\]$//; s/^( *[0-9,]+ +\([ .0-9]+%\)) +[^:]*:/\1  /' | swift demangle --simplified \
    | awk '!seen[substr($0, index($0, "%)") + 2)]++' | head -25 | cut -c1-150
