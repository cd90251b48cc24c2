#!/usr/bin/env bash
# Counts the relay's instructions per cycle with callgrind, which repeat from run to run
# where timings do not: `permission-bench core` drives the core and its store in-process
# (no sockets) for two run lengths, and the difference per cycle leaves out start-up and
# provisioning. Usage: scripts/profile-core.sh [F] [W] [KEEP]  (default 100 8). With KEEP,
# the relay keeps that many questions per child and both runs go past it, so the count is
# of a relay at its limit, forgetting a finished question at every ask (a long-running
# relay's state; the default limit, 10,000, is too many questions for callgrind to reach).
# Needs valgrind.
# The C targets are built with DWARF 4 debug info: valgrind 3.19 cannot read clang's DWARF 5.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # the comment above, as help
    sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi
cd "$(dirname "$0")/.."
families=${1:-100}
window=${2:-8}
keep=${3:-}
if ! [[ "$families" =~ ^[1-9][0-9]*$ && "$window" =~ ^[1-9][0-9]*$ && "$keep" =~ ^([1-9][0-9]*)?$ ]] || [ $# -gt 3 ]; then
    echo "profile-core: usage: scripts/profile-core.sh [FAMILIES] [WINDOW] [KEEP], positive whole numbers (--help says more)" >&2
    exit 64
fi
command -v valgrind > /dev/null || { echo "valgrind is needed: apt-get install valgrind" >&2; exit 1; }
swift build -c release --scratch-path .build/profile -Xcc -gdwarf-4 --product permission-bench
bench=.build/profile/release/permission-bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
short_rounds=5
limit=()
if [ -n "$keep" ]; then
    short_rounds=$(( (keep + window - 1) / window + 5 ))  # past the limit by five rounds
    limit=(--max-questions-per-child "$keep")
fi
long_rounds=$(( short_rounds + 10 ))
for rounds in $short_rounds $long_rounds; do
    echo "callgrind over $rounds rounds of (F, W) = ($families, $window)${keep:+, $keep questions kept per child}…" >&2
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$rounds" "$bench" core \
        --families "$families" --window "$window" --rounds "$rounds" "${limit[@]}" > /dev/null 2> "$out/log.$rounds" \
        || { cat "$out/log.$rounds" >&2; exit 1; }
done
short=$(awk '/^summary:/ {print $2}' "$out/cg.$short_rounds")
long=$(awk '/^summary:/ {print $2}' "$out/cg.$long_rounds")
echo "instructions per cycle (core, store and its writer thread): $(( (long - short) / (10 * families * window) ))"
echo "where they go (the longer run, inclusive, the relay's own functions):"
callgrind_annotate --inclusive=yes "$out/cg.$long_rounds" 2> /dev/null | grep -E '^ *[0-9,]+ .*Sources/Relay' \
    | sed -E 's/ \[[^]]*\]$//; s/^( *[0-9,]+ +\([ .0-9]+%\)) +[^:]*:/\1  /' | swift demangle --simplified \
    | awk '!seen[substr($0, index($0, "%)") + 2)]++' | head -25 | cut -c1-150
