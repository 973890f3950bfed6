#!/usr/bin/env bash
# `make bench`: the benchmark scripts of tests/bench, each with a short default so the whole set
# runs in minutes; every script prints its figures as ratios against the anchor it names, in the
# same run. Pick some with BENCH="instructions proxy-load" (default: all below); lengthen with the
# scripts' own knobs (DURATION, N1/N2, …; see each script's header). Not run in CI.
# BENCH=side-by-side (apiagg against kube-apiserver's aggregator, issue 45) runs only when named:
# its first run builds the real Kubernetes servers with Go (scripts/need.sh kube); QUICK=1 here.
set -euo pipefail
cd "$(dirname "$0")/.."
all="instructions proxy-load discovery-load trust-load watch-scale availability startup apiservice-api overload"
cargo build --release -p apiagg-gateway -p apiagg-tests --bins
export SKIP_BUILD=1
export DURATION="${DURATION:-3}" WARMUP="${WARMUP:-1}"
for bench in ${BENCH:-$all}; do
    script="tests/bench/$bench.sh"
    [[ -x "$script" ]] || { echo "no benchmark $script" >&2; exit 2; }
    echo "=== $bench"
    case "$bench" in
        availability) KILLS="${KILLS:-5}" "$script" ;;
        startup) APISERVICES="${APISERVICES:-50}" SERVERS="${SERVERS:-5}" "$script" ;;
        overload) FLOOD="${FLOOD:-2000}" "$script" ;;
        side-by-side) QUICK="${QUICK:-1}" "$script" ;;
        *) "$script" ;;
    esac
done
