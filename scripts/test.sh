#!/usr/bin/env bash
# Runs the whole test suite: unit, store, raw-wire and end-to-end tests (the
# end-to-end tests start the built permission-relay binary on temporary sockets).
set -euo pipefail
cd "$(dirname "$0")/.."
exec swift test --disable-swift-testing "$@"
