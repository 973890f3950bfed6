#!/usr/bin/env bash
# Silent-endpoint benchmark: an APIService with two endpoints, one of which goes silent mid-traffic.
#
# Usage (from the repo root):   tests/bench/silent-endpoint.sh
#
# Setup: apiagg (release build, default probes: every 500 ms, 500 ms timeout, ejected after 3 in
# a row) with one APIService, v1.lb.example.com (resource foos), served by two sample-apiservers
# named x and y. Endpoint x is reached through a TCP relay (silent_endpoint_helper.py relay) that,
# $WARMUP_S s into the load, goes silent: it forwards nothing more in either direction and closes
# nothing (no RST, no FIN), and holds the connections it accepts from then on without reaching x
# — a black-holed network path (kubernetes#141318). As tests/src/relay.rs in e2e, but stricter:
# after the silence not even a close (EOF) from either side is passed on.
# The load: GET /apis/lb.example.com/v1/foos through apiagg $RATE times a second, each on its own
# connection, not waiting for the one before, with a client timeout of $TIMEOUT_S s, from
# $WARMUP_S s before the silence until $AFTER_S s after it. Cases:
#   h1   x and y serve plain HTTP (as backend() in tests/src/backends.rs); Service test/lb;
#   h2   x and y serve TLS offering h2 with one certificate (x generates it for h2.test.svc in
#        DIR, y reuses DIR); Service test/h2, APIService caBundle = DIR/ca.crt.
# A fresh relay and apiagg per run, $RUNS runs per case. Per run: requests; failed (not 200, or
# no answer within the timeout); worst and p99 latency; the share of the requests sent >= 3 s
# after the silence that y answered (X-Sample-Server); the time from the silence until
# /debug/apiagg/status shows the relay's endpoint "healthy": false (polled every 10 ms).
# Goal: no request fails or waits more than 5 s, and from 3 s on every request is answered by y.
# Exits 1 when a run misses it.
# Anchor: on the pingora-proxy path (commit 7ba07b3) this scenario measured "8 of 197 failed,
# worst 6.95 s" (printed, not rebuilt); kube-aggregator keeps such an HTTP/2 connection pinned
# for ~45 s (kubernetes#141318).
#
# Environment: CARGO_TARGET_DIR (default: <repo>/target), RUNS (3), CASES ("h1 h2"), RATE (10),
# WARMUP_S (5), AFTER_S (15), TIMEOUT_S (30), SKIP_BUILD=1, KEEP_TMP=1, APIAGG_ARGS.
# Needs: cargo, python3.

set -euo pipefail

log() { printf '[silent-endpoint] %s\n' "$*" >&2; }
die() { printf '[silent-endpoint] error: %s\n' "$*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
plh="$here/proxy_load_helper.py"
helper="$here/silent_endpoint_helper.py"

RUNS="${RUNS:-3}"
CASES="${CASES:-h1 h2}"
RATE="${RATE:-10}"
WARMUP_S="${WARMUP_S:-5}"
AFTER_S="${AFTER_S:-15}"
TIMEOUT_S="${TIMEOUT_S:-30}"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"

command -v python3 >/dev/null 2>&1 || die "'python3' not found"
source "$here/lib.sh"
build_release_bins

bench_temp silent-endpoint

cp "$target_dir/release/apiagg" "$target_dir/release/sample-apiserver" "$tmp/"

busy="$(python3 "$plh" system-busy 1)"
(( busy <= 10 )) || log "WARNING: other processes kept the CPUs ${busy}% busy before starting: timings will be noisy."

# wait_line FILE PATTERN SECONDS: until FILE has a line matching PATTERN.
wait_line() {
    local i
    for i in $(seq $(( $3 * 20 ))); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

# sample NAME PORT ARGS...: starts a sample-apiserver serving lb.example.com/v1 foos on PORT.
sample() {
    local name="$1" port="$2"
    shift 2
    "$tmp/sample-apiserver" --listen "127.0.0.1:$port" --group lb.example.com --version v1 \
        --resource foos --kind Foo --name "$name" "$@" >"$tmp/$name.out" 2>"$tmp/$name.log" &
    pids+=("$!")
    wait_line "$tmp/$name.out" '^listening on' 10 || die "sample $name did not start: $(tail -n 20 "$tmp/$name.log")"
}

results="$tmp/silent-endpoint.tsv"
path=/apis/lb.example.com/v1/foos
for case in $CASES; do
    read -r x_port y_port <<<"$(python3 "$plh" free-ports 2)"
    case "$case" in
        h1)
            scheme=http service=lb tls_spec=""
            sample x "$x_port"
            sample y "$y_port"
            ;;
        h2)
            scheme=https service=h2
            mkdir -p "$tmp/certs"
            sample x "$x_port" --tls --cert-dir "$tmp/certs" --h2 --hostname h2.test.svc
            sample y "$y_port" --tls --cert-dir "$tmp/certs" --h2
            tls_spec=", caBundle: $(base64 -w0 "$tmp/certs/ca.crt")"
            ;;
        *) die "unknown case '$case' (h1, h2)" ;;
    esac
    samples=("${pids[@]: -2}")
    for run in $(seq "$RUNS"); do
        # A fresh relay and apiagg per run: no ejection, backoff or pooled connection carried over.
        dir="$tmp/$case-$run"   # the relay's output, apiagg's config, data dir and log
        mkdir -p "$dir"
        read -r relay_port apiagg_port <<<"$(python3 "$plh" free-ports 2)"
        python3 "$helper" relay "$relay_port" "$x_port" >"$dir/relay.out" 2>&1 &
        relay_pid=$!
        pids+=("$relay_pid")
        wait_line "$dir/relay.out" '^relaying' 10 || die "relay did not start: $(cat "$dir/relay.out")"
        relay_url="$scheme://127.0.0.1:$relay_port"
        cat >"$dir/apiagg.yaml" <<EOF
listen: 127.0.0.1:$apiagg_port
authorization: {allowAnyoneToReadMetrics: true}
services:
  - {namespace: test, name: $service, port: 443, endpoints: ["$relay_url", "$scheme://127.0.0.1:$y_port"]}
apiServices:
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: v1.lb.example.com}
    spec: {group: lb.example.com, version: v1, groupPriorityMinimum: 1000, versionPriority: 15, service: {namespace: test, name: $service, port: 443}$tls_spec}
EOF
        "$tmp/apiagg" check --config "$dir/apiagg.yaml" >"$dir/check.log" 2>&1 \
            || die "apiagg check rejected the config: $(cat "$dir/check.log")"
        log "$case run $run: apiagg on 127.0.0.1:$apiagg_port ${APIAGG_ARGS:-}; x on $x_port behind the relay on $relay_port, y on $y_port"
        # shellcheck disable=SC2086 # APIAGG_ARGS is a list of words
        "$tmp/apiagg" serve --config "$dir/apiagg.yaml" ${APIAGG_ARGS:-} >"$dir/apiagg.log" 2>&1 &
        apiagg_pid=$!
        pids+=("$apiagg_pid")
        python3 "$plh" wait-http "http://127.0.0.1:$apiagg_port/healthz" 30 \
            || die "apiagg did not start: $(tail -n 20 "$dir/apiagg.log")"
        python3 "$helper" run "$apiagg_port" "$path" "$relay_pid" "$relay_url" x y \
            "$RATE" "$WARMUP_S" "$AFTER_S" "$TIMEOUT_S" "$case" "$run" "$results" \
            || die "$case run $run: measurement failed (KEEP_TMP=1 keeps the logs)"
        stop_pid "$apiagg_pid"
        stop_pid "$relay_pid"
    done
    for pid in "${samples[@]}"; do stop_pid "$pid"; done
done

log "$(nproc) CPUs, $(uname -r); rate $RATE/s, silence at ${WARMUP_S} s, load until ${AFTER_S} s after, client timeout ${TIMEOUT_S} s"
python3 "$helper" report "$results"
