#!/usr/bin/env bash
# Issue 23, step 1: RSS per idle proxied watch for the pingora-core prototype
# (gateway/examples/core_proxy.rs) and for apiagg today, in one run, over the same kind of backend.
#
# The method is watch-scale.sh's (watch_scale_helper.py `run`): one sample-apiserver over plain
# HTTP/1.1; a front (--threads 1 / one pingora thread) in front of it; N watches
# (`GET /apis/wardle.example.com/v1alpha1/flunders?watch=true`, raw HTTP/1.1, kept open) opened
# through the front; the front's RSS before and with them open (3 s after the last opened) gives
# KiB per idle watch. Then one object is created and a sample of SAMPLE watchers must receive its
# ADDED event through the front (proof each watch streams its chunks as they come, not buffered).
# The prototype does not forward request bodies, so for it the object is created on the backend
# directly; through apiagg it is created through apiagg (as watch-scale.sh does).
#
# Fronts (FRONTS, default "apiagg prototype prototype-own-pool"), each against its own fresh backend:
#   apiagg               release apiagg, one remote APIService on the backend (APF on, defaults)
#   prototype            core_proxy with pingora's upstream pool
#   prototype-own-pool   core_proxy own-pool (idle upstream connections in a plain Vec)
#   prototype-hold       core_proxy hold: no upstream at all; each watch gets its head and is
#                        held. What pingora-core's server side alone holds per idle watch: a
#                        floor under any backend protocol (h2 backends share connections, so
#                        their cost per watch is this floor plus a stream's). No event is sent:
#                        its sample is 0.
#
# NOT measured: an h2 backend (issue 23's gate is per idle watch over an h2 backend, where watches
# share connections); the prototype speaks HTTP/1.1 only (no h2, no TLS), so every watch here
# holds its own backend connection in every front.
#
# N: 5,000 by default (the front holds 2 sockets per watch; needs an open-file limit above 2N).
# Environment: N, SAMPLE (100), FRONTS, SKIP_BUILD=1, KEEP_TMP=1, CARGO_TARGET_DIR.
# Usage (from the repo root): tests/bench/core-prototype-watches.sh
# Needs: cargo, python3 (3.11+).

set -euo pipefail

log() { printf '[core-prototype-watches] %s\n' "$*" >&2; }
die() { printf '[core-prototype-watches] error: %s\n' "$*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
helper="$here/watch_scale_helper.py"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
FRONTS="${FRONTS:-apiagg prototype prototype-own-pool prototype-hold}"
SAMPLE="${SAMPLE:-100}"
N="${N:-5000}"

source "$here/lib.sh"
raise_open_files
(( hard >= 2 * N + 200 )) || die "open-file limit $hard is too low for N=$N (needs 2N+200)"
log "N=$N watches per front, open-file limit $(ulimit -n)"

if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    (cd "$repo" && CARGO_TARGET_DIR="$target_dir" \
        cargo build --release -p apiagg-gateway -p apiagg-tests --examples --bins) \
        || die "cargo build failed"
fi
bench_temp core-prototype-watches
for bin in apiagg sample-apiserver examples/core_proxy; do
    [[ -x "$target_dir/release/$bin" ]] || die "$target_dir/release/$bin not found"
    cp "$target_dir/release/$bin" "$tmp/${bin#examples/}"
done
path=/apis/wardle.example.com/v1alpha1/flunders

start_backend() { # $1 = dir; sets backend_url, backend_pid
    local dir="$1" url=""
    : >"$dir/backend.out"
    "$tmp/sample-apiserver" --listen 127.0.0.1:0 --name wardle --hostname wardle.test.svc \
        >"$dir/backend.out" 2>"$dir/backend.log" &
    backend_pid=$!
    pids+=("$backend_pid")
    for _ in $(seq 100); do
        url="$(sed -n 's/^listening on //p' "$dir/backend.out")"
        [[ -n "$url" ]] && break
        sleep 0.1
    done
    [[ -n "$url" ]] || die "sample-apiserver did not start: $(tail -n 5 "$dir/backend.log")"
    backend_url="$url"
}

results="$tmp/results.txt"
: >"$results"
failed=0
run_front() { # $1 = front
    local name="$1" dir="$tmp/run-$1" port pid out rc=0 ready create_port
    mkdir -p "$dir"
    start_backend "$dir"
    local backend_port="${backend_url##*:}"
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    case "$name" in
        apiagg)
            python3 "$helper" config "$dir" "$port" "$backend_url"
            "$tmp/apiagg" serve --config "$dir/apiagg.yaml" --data-dir "$dir/data" --threads 1 \
                >"$dir/front.log" 2>&1 &
            ready="http://127.0.0.1:$port/readyz"
            create_port="$port"
            ;;
        prototype | prototype-own-pool | prototype-hold)
            local extra=()
            [[ "$name" == prototype-own-pool ]] && extra=(own-pool)
            [[ "$name" == prototype-hold ]] && extra=(hold)
            "$tmp/core_proxy" "127.0.0.1:$port" "127.0.0.1:$backend_port" "${extra[@]}" \
                >"$dir/front.log" 2>&1 &
            ready="http://127.0.0.1:$port$path"
            create_port="$backend_port"
            ;;
        *) die "unknown front $name" ;;
    esac
    pid=$!
    pids+=("$pid")
    python3 "$helper" wait-ready "$ready" 30 \
        || die "$name did not become ready: $(tail -n 20 "$dir/front.log")"
    log "$name: backend $backend_url, pid $pid on 127.0.0.1:$port; opening $N watches"
    local sample="$SAMPLE"
    [[ "$name" == prototype-hold ]] && sample=0
    out="$(python3 "$helper" run --port "$port" --pid "$pid" --n "$N" \
        --backend-port "$backend_port" --sample "$sample" --create-port "$create_port")" || rc=$?
    grep -q '^RESULT ' <<<"$out" || die "$name: no result (exit $rc): $out"
    (( rc == 0 )) || { failed=1; log "$name: FAILED (a watch did not open or missed the event)"; }
    printf '%s %s\n' "$name" "${out#RESULT }" >>"$results"
    log "$name: ${out#RESULT }"
    stop_pid "$pid"
    stop_pid "$backend_pid"
}

for f in $FRONTS; do run_front "$f"; done

echo
printf '%-20s %7s %10s %10s %10s %13s %7s %8s %8s\n' front watches rss_base rss_open \
    "KiB/watch" "KiB/w+event" fds backend sample
while read -r name rest; do
    declare -A r=()
    for kv in $rest; do r[${kv%%=*}]="${kv#*=}"; done
    printf '%-20s %7s %8s K %8s K %10s %13s %7s %8s %8s\n' "$name" "${r[open]}" \
        "${r[rss_base_kib]}" "${r[rss_open_kib]}" "${r[kib_per_watch]}" \
        "${r[kib_per_watch_after_event]}" "${r[fds]}" "${r[backend_conns]}" \
        "${r[sample_got_event]}"
    unset r
done <"$results"
echo
echo "HTTP/1.1 backend, one backend connection per watch; an h2 backend is NOT measured here."
echo "issue 23 gate: <= 20 KiB per idle watch over an h2 backend"
exit "$failed"
