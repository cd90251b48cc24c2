#!/usr/bin/env bash
# Builds in release mode and runs the benchmark's standard grid (pass options through,
# e.g. `scripts/bench.sh --grid quick` or `--families 100 --window 8 --json`).
# `scripts/bench.sh --long` runs (100, 8) for ten minutes on one relay, with a line a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
# The build's progress goes to stderr: stdout is the benchmark's (`--json > file`).
swift build -c release --product permission-relay >&2
swift build -c release --product permission-bench >&2
if [ "${1:-}" = "--long" ]; then
    shift
    set -- --families 100 --window 8 --duration 600 --every 60 "$@"
fi
exec "$(swift build -c release --show-bin-path)/permission-bench" "$@"
