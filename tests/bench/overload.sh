#!/usr/bin/env bash
# One caller floods a slow APIService with 10,000 requests while others use another backend,
# the delegate and discovery (tests/tests/e2e/overload.rs on a release build): prints how many of
# the others were served, their p99 latency, and apiagg's RSS and open files.
# Usage (from the repo root): tests/bench/overload.sh   (FLOOD to change the flood's size)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
cargo build --release -p apiagg-gateway -p apiagg-tests --bins
APIAGG_OVERLOAD_FLOOD="${FLOOD:-10000}" cargo test --release -p apiagg-tests --test e2e overload:: -- --nocapture 2>&1 |
    grep -E '^overload:|test result'
