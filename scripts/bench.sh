#!/usr/bin/env bash
# Builds in release mode and runs the benchmark's standard grid (pass options through,
# e.g. `scripts/bench.sh --grid quick` or `--families 100 --window 8 --json`).
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product permission-relay
swift build -c release --product permission-bench
exec "$(swift build -c release --show-bin-path)/permission-bench" "$@"
