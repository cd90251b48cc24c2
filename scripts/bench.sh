#!/usr/bin/env bash
# Builds in release mode and runs the benchmark's standard grid (pass options through,
# e.g. `scripts/bench.sh --grid quick` or `--families 100 --window 8 --json`).
set -euo pipefail
cd "$(dirname "$0")/.."
# The build's progress goes to stderr: stdout is the benchmark's (`--json > file`).
swift build -c release --product permission-relay >&2
swift build -c release --product permission-bench >&2
exec "$(swift build -c release --show-bin-path)/permission-bench" "$@"
