#!/usr/bin/env bash
# Shutdown drain at scale: 10,000 open watches, SIGTERM, and how they end, measured at the
# client (issue 46 item 5).
#
# Usage (from the repo root):   tests/bench/shutdown-drain.sh
#
# Runs the e2e test `shutdown::watches_end_at_upstreams_rate_at_scale` (ignored by default):
# apiagg serving TLS in front of one sample-apiserver over HTTP/2, N watches opened through it
# as HTTP/2 streams, 200 on each TLS connection (client-go's way; N=10,000: 50 connections),
# then SIGTERM with `--shutdown-watch-termination-grace-period GRACE`. Each watch's end is
# timed where the client reads it. Printed: the drain rate upstream's computation gives
# (N / GRACE, at least 200 a second), the span it implies, the watches ended cleanly and those
# reset, when the first, median and last ended after SIGTERM, and the most ends within any
# second and any 100 ms. The test fails when a watch was reset, when any second saw more than
# the rate (a fifth more, and 10, for the client's own scheduling), or when the ends do not
# span the period the rate gives.
#
# Environment: N (10000), GRACE (seconds, 20: 500 watches a second), CARGO_TARGET_DIR.
# Needs: cargo; an open-file limit of 2 × N / 100 + 1,000 or so (apiagg holds one socket per
# client connection and about one per 100 backend streams).

set -euo pipefail

log() { printf '[shutdown-drain] %s\n' "$*" >&2; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/lib.sh"
raise_open_files
N="${N:-10000}"
GRACE="${GRACE:-20}"
log "N=$N watches, grace period ${GRACE}s, open-file limit $(ulimit -n)"
bench_temp shutdown-drain
cd "$repo"
rc=0
DRAIN_WATCHES="$N" DRAIN_GRACE_SECONDS="$GRACE" cargo test -p apiagg-tests --test e2e \
    shutdown::watches_end_at_upstreams_rate_at_scale -- --ignored --exact --nocapture \
    >"$tmp/out" 2>&1 || rc=$?
grep -E '^(RESULT|first reset)' "$tmp/out" || { tail -n 40 "$tmp/out" >&2; exit 1; }
(( rc == 0 )) || { grep -E 'panicked|assert' "$tmp/out" >&2 || true; log "FAILED"; }
exit "$rc"
