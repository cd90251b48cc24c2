#!/usr/bin/env bash
# Runs the whole test suite: unit, store, raw-wire and end-to-end tests. The end-to-end
# tests start the programs as users run them: the release build, made first.
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release
PERMISSION_PROGRAMS_DIR="$(swift build -c release --show-bin-path)" exec swift test --disable-swift-testing "$@"
