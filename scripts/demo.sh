#!/usr/bin/env bash
# A three-process demo on a private temporary relay: the relay, a guardian that
# approves every question, and a child that asks and waits for the answer.
#   scripts/demo.sh            # the guardian is a bot (permission-guardian auto --approve)
#   scripts/demo.sh --manual   # you are the guardian: answer in the interactive view
# It runs the release programs in .build/release, and first builds them with
# `swift build -c release` (saying so) when one is missing or older than its sources.
# PERMISSION_BIN_DIR=DIR uses the programs already built in DIR instead of building them.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # the comment above, as help
    sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
fi
if [ $# -gt 1 ] || { [ $# -eq 1 ] && [ "$1" != "--manual" ]; }; then
    echo "demo: unknown option ${2:-$1}; usage: scripts/demo.sh [--manual] (--help says more)" >&2
    exit 64
fi
cd "$(dirname "$0")/.."

bin=${PERMISSION_BIN_DIR:-}
if [ -z "$bin" ]; then
    bin=$PWD/.build/release
    # A build that changed no object file links nothing, so the programs may stay older than
    # an edited source: the stamp says when this script last built them.
    stamp=$bin/.demo-built
    why=
    for program in permission-relay permission-child permission-guardian; do
        if [ ! -x "$bin/$program" ]; then
            why="$bin/$program is missing"
            break
        fi
        since=$bin/$program
        [ "$stamp" -nt "$since" ] && since=$stamp
        # the sources of the three programs: all but the benchmark's and the harness's
        newer=$(find Package.swift Sources -type f -newer "$since" \
            -not -path 'Sources/permission-bench/*' -not -path 'Sources/permission-harness/*' -print -quit)
        if [ -n "$newer" ]; then
            why="$newer is newer than $bin/$program"
            break
        fi
    done
    if [ -n "$why" ]; then
        echo "demo: building the release programs with \`swift build -c release\` ($why)" >&2
        if ! built=$(swift build -c release 2>&1); then
            printf '%s\n' "$built" >&2
            echo "demo: the release build failed" >&2
            exit 1
        fi
        touch "$stamp"
    fi
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/permission-demo.XXXXXX")
cleanup() {
    # A child still waiting would keep trying to reach the stopped relay: it is told to stop.
    [ -n "${child_pid:-}" ] && kill -INT "$child_pid" 2>/dev/null || true
    kill "$relay_pid" ${guardian_pid:-} 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

"$bin/permission-relay" serve --socket "$dir/relay.sock" --data "$dir/data" > "$dir/relay.log" 2>&1 &
relay_pid=$!
until [ -S "$dir/relay.sock" ]; do
    if ! kill -0 "$relay_pid" 2>/dev/null; then
        echo "demo: the relay did not start:" >&2
        cat "$dir/relay.log" >&2
        exit 1
    fi
    sleep 0.05
done
echo "1. relay listening on $dir/relay.sock"

export PERMISSION_RELAY_SOCKET="$dir/relay.sock" PERMISSION_STATE_DIR="$dir/state"
"$bin/permission-relay" family create smiths > /dev/null
"$bin/permission-relay" member add smiths alex --role child --credentials "$dir/alex.json" > /dev/null
"$bin/permission-relay" member add smiths sam --role guardian --credentials "$dir/sam.json" > /dev/null
echo "2. family smiths: child alex, guardian sam (their credentials in $dir while the demo runs)"

if [ "${1:-}" = "--manual" ]; then
    echo "3. alex asks; answer in the guardian view (press a to approve, q to quit)"
    "$bin/permission-child" ask phone:+15550100 --name "Kim Lee" --action message --expires 10m \
        --credentials "$dir/alex.json" --wait > "$dir/child.out" 2>&1 &
    child_pid=$!
    # Quit with q (0), or Ctrl-C (130, which the demo ends with too): either way the demo ends below.
    status=0
    "$bin/permission-guardian" --credentials "$dir/sam.json" || status=$?
    # An answer given just before quitting takes the child a moment to hear.
    for _ in $(seq 40); do kill -0 "$child_pid" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$child_pid" 2>/dev/null; then
        # Not the child's own advice to wait again: the demo's relay and its data go now.
        how="you quit without answering"
        [ "$status" -eq 130 ] && how="stopped by Ctrl-C"
        echo "4. $how: alex stops waiting, and the demo's relay stops with its data"
        kill -INT "$child_pid"
        wait "$child_pid" || true
        exit "$status"
    fi
    wait "$child_pid" || true
    cat "$dir/child.out"
    exit "$status"
fi

# Not a pipeline: $! must be the guardian's own pid, or cleanup would stop only sed and then
# wait forever for a guardian that keeps reconnecting to the stopped relay.
"$bin/permission-guardian" auto --approve --credentials "$dir/sam.json" 2>/dev/null > >(sed -u 's/^/   guardian: /') &
guardian_pid=$!
echo "3. guardian sam is a bot that approves every question"
echo "4. alex asks to message Kim Lee and waits:"
"$bin/permission-child" ask phone:+15550100 --name "Kim Lee" --action message --credentials "$dir/alex.json" --wait 2>/dev/null |
    sed 's/^/   child: /'
"$bin/permission-child" known +15550100 --credentials "$dir/alex.json" | sed 's/^/   child: /'

