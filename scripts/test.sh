#!/usr/bin/env bash
# Runs the whole test suite: unit, store, raw-wire and end-to-end tests. The end-to-end
# tests start the programs as users run them: the release build, made first.
# Options go to `swift test`, e.g. `scripts/test.sh --filter StoreCommandTests`.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -h|--help) sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
swift build -c release
PERMISSION_PROGRAMS_DIR="$(swift build -c release --show-bin-path)" exec swift test --disable-swift-testing "$@"
