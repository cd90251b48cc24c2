#!/usr/bin/env bash
# Checks formatting with the toolchain's swift-format (configuration: .swift-format).
set -euo pipefail
cd "$(dirname "$0")/.."
exec swift format lint --recursive --parallel Sources Tests Package.swift Examples "$@"
