#!/usr/bin/env bash
# Watch scale: apiagg's memory per open proxied watch, and proof the watches are live.
#
# Usage (from the repo root):   tests/bench/watch-scale.sh
#
# For each case a release apiagg (--threads 1) is started in front of one sample-apiserver, N
# watches (`GET /apis/wardle.example.com/v1alpha1/flunders?watch=true`, kept open) are opened
# through it by one asyncio client, then one object is created through apiagg and a sample of
# SAMPLE watchers spread over the N must receive its ADDED event. Reported per case: apiagg's RSS
# before, with the N watches open and after the event reached them, RSS per watch (KiB), client
# connections and streams on each, file descriptors apiagg holds for them, and TCP connections
# to the backend.
# Cases (CASES, default "plain tls-h1 tls-h2 h2-client"); the first three open each watch as raw
# HTTP/1.1 on a plain connection of its own:
#   plain      backend over plain HTTP (HTTP/1.1: one backend connection per watch)
#   tls-h1     backend over TLS offering only http/1.1 in ALPN (one connection per watch)
#   tls-h2     backend over TLS offering h2 (kube-apiserver does): watches share HTTP/2 connections
#   h2-client  as client-go: apiagg serves TLS with h2 in ALPN and each watch is an HTTP/2 stream,
#              STREAMS_PER_CONN (100) on each client connection (N=5,000: 50 TLS connections;
#              fewer streams when apiagg's SETTINGS_MAX_CONCURRENT_STREAMS is lower: the table's
#              footnote gives it); backend as tls-h2. The client is the `h2` package (PyPI),
#              installed by scripts/need.sh when missing. apiagg serves the backend's generated
#              pair (its names include 127.0.0.1): one throwaway CA for both.
# Goals: (issue 12) 10,000 watches, at most 20 KiB of apiagg RSS each, every sampled one live;
# h2-client: at most 8 KiB of apiagg RSS per watch, every sampled one live.
#
# N: 10,000 when this script can raise its open-file limit to 40,000 (the client, apiagg and the
# backend each hold up to N or 2N sockets); otherwise 5,000, and the script says so. N=… overrides
# (h2-client needs only N/STREAMS_PER_CONN client sockets, so any N fits there).
# WATCH_QUERY: the watches' query instead of `watch=true`, e.g. a streaming list
# (`watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true`:
# against the sample backend, which ignores it, apiagg emulates each one).
# Environment: N, SAMPLE (100), CASES, STREAMS_PER_CONN (100), APIAGG_ARGS (extra `apiagg serve`
# arguments), APIAGG_WRAPPER (a command apiagg runs under, e.g. `valgrind --tool=dhat
# --dhat-out-file=/tmp/w.dhat`: RSS is then valgrind's), WATCH_QUERY, SKIP_BUILD=1 (use the existing release binaries), KEEP_TMP=1,
# CARGO_TARGET_DIR.
# Needs: cargo, python3 (3.11+); h2-client also the Python package h2 (installed with pip).

set -euo pipefail

log() { printf '[watch-scale] %s\n' "$*" >&2; }
die() { printf '[watch-scale] error: %s\n' "$*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
helper="$here/watch_scale_helper.py"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
CASES="${CASES:-plain tls-h1 tls-h2 h2-client}"
SAMPLE="${SAMPLE:-100}"
STREAMS_PER_CONN="${STREAMS_PER_CONN:-100}"
if [[ " $CASES " == *" h2-client "* ]]; then "$repo/scripts/need.sh" python:h2; fi

# ---------------------------------------------------------------------------------------------
# File descriptors: children inherit this process's limits.
source "$here/lib.sh"
raise_open_files
if [[ -z "${N:-}" ]]; then
    if (( hard >= 40000 )); then
        N=10000
    else
        N=5000
        log "the open-file limit stops at $hard (< 40,000; raising it needs CAP_SYS_RESOURCE): N=5000."
        log "  (an HTTP/1.1 backend costs apiagg 2 descriptors per watch; over HTTP/2 about 1,"
        log "   so N=$(( (hard - 200) ))-ish fits the tls-h2 case: N=10000 CASES=tls-h2 $0;"
        log "   h2-client holds N/$STREAMS_PER_CONN client connections: N=10000 CASES=h2-client $0)"
    fi
fi
log "N=$N watches per case, open-file limit $(ulimit -n)"

# ---------------------------------------------------------------------------------------------
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    log "building apiagg and sample-apiserver (release) in $target_dir"
    (cd "$repo" && CARGO_TARGET_DIR="$target_dir" \
        cargo build --release -p apiagg-gateway -p apiagg-tests --bins) || die "cargo build failed"
fi
bench_temp watch-scale
# Private copies: other builds in the same target dir cannot swap a binary mid-run.
for bin in apiagg sample-apiserver; do
    [[ -x "$target_dir/release/$bin" ]] || die "$target_dir/release/$bin not found"
    cp "$target_dir/release/$bin" "$tmp/$bin"
done

# Prints the URL of a started sample-apiserver; $1 = case dir, then its extra arguments.
start_backend() {
    local dir="$1" url=""
    shift
    : >"$dir/backend.out" # exists before the background process opens it
    "$tmp/sample-apiserver" --listen 127.0.0.1:0 --name wardle --hostname wardle.test.svc "$@" \
        >"$dir/backend.out" 2>"$dir/backend.log" &
    pids+=("$!")
    backend_pid=$!
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
run_case() { # $1 = case
    local name="$1" dir="$tmp/$1" port out rc=0 scheme=http ca=() serving=() client=(--client h1)
    mkdir -p "$dir"
    case "$name" in
        plain) start_backend "$dir" ;;
        tls-h1) start_backend "$dir" --tls --cert-dir "$dir/certs" ;;
        tls-h2) start_backend "$dir" --tls --cert-dir "$dir/certs" --h2 ;;
        h2-client)
            start_backend "$dir" --tls --cert-dir "$dir/certs" --h2
            scheme=https
            ca=("$dir/certs/ca.crt")
            serving=("$dir/certs/tls.crt" "$dir/certs/tls.key")
            client=(--client h2 --ca "$dir/certs/ca.crt" --streams-per-conn "$STREAMS_PER_CONN")
            ;;
        *) die "unknown case $name" ;;
    esac
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    python3 "$helper" config "$dir" "$port" "$backend_url" "$dir/certs/ca.crt" "${serving[@]}"
    # shellcheck disable=SC2086 # APIAGG_WRAPPER and APIAGG_ARGS are lists of words
    ${APIAGG_WRAPPER:-} "$tmp/apiagg" serve --config "$dir/apiagg.yaml" --data-dir "$dir/data" --threads 1 \
        ${APIAGG_ARGS:-} >"$dir/apiagg.log" 2>&1 &
    local pid=$!
    pids+=("$pid")
    python3 "$helper" wait-ready "$scheme://127.0.0.1:$port/readyz" 30 "${ca[@]}" \
        || die "apiagg did not become ready: $(tail -n 20 "$dir/apiagg.log")"
    log "$name: backend $backend_url, apiagg pid $pid on 127.0.0.1:$port; opening $N watches"
    out="$(python3 "$helper" run --port "$port" --pid "$pid" --n "$N" \
        --backend-port "${backend_url##*:}" --sample "$SAMPLE" "${client[@]}")" || rc=$?
    grep -q '^RESULT ' <<<"$out" || die "$name: no result (exit $rc): $out"
    (( rc == 0 )) || { failed=1; log "$name: FAILED (a watch did not open or missed the event)"; }
    printf '%s %s\n' "$name" "${out#RESULT }" >>"$results"
    log "$name: ${out#RESULT }"
    grep -E ' (ERROR|WARN) ' "$dir/apiagg.log" | head -n 5 >&2 || true
    stop_pid "$pid"
    stop_pid "$backend_pid"
}

for c in $CASES; do run_case "$c"; done

# ---------------------------------------------------------------------------------------------
echo
printf '%-9s %7s %7s %8s %10s %10s %10s %11s %12s %6s %8s %8s\n' case watches conns \
    str/conn rss_base rss_open "KiB/watch" "+event" "KiB/w+event" fds backend sample
notes=()
while read -r name rest; do
    declare -A r=()
    for kv in $rest; do r[${kv%%=*}]="${kv#*=}"; done
    printf '%-9s %7s %7s %8s %8s K %8s K %10s %9s K %12s %6s %8s %8s\n' "$name" "${r[open]}" \
        "${r[client_conns]}" "${r[streams_per_conn]:-1}" "${r[rss_base_kib]}" \
        "${r[rss_open_kib]}" "${r[kib_per_watch]}" "${r[rss_after_event_kib]}" \
        "${r[kib_per_watch_after_event]}" "${r[fds]}" "${r[backend_conns]}" \
        "${r[sample_got_event]}"
    if [[ -n "${r[server_max_streams]:-}" ]]; then
        notes+=("$name: apiagg's SETTINGS_MAX_CONCURRENT_STREAMS ${r[server_max_streams]} (asked for $STREAMS_PER_CONN streams per connection)")
    fi
    unset r
done <"$results"
echo
for note in "${notes[@]}"; do echo "$note"; done
echo "goals: 10,000 watches at <= 20 KiB of apiagg RSS each, every sampled watcher live;"
echo "       h2-client <= 8 KiB of apiagg RSS per watch"
exit "$failed"
