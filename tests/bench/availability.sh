#!/usr/bin/env bash
# Availability benchmark: how fast apiagg notices a dead backend and notices it back.
#
# Usage (from the repo root):   tests/bench/availability.sh
#
# Setup: apiagg (release build, default --probe-interval 500ms unless APIAGG_ARGS says otherwise)
# with two backends (sample-apiserver): the victim, wardle.example.com/v1alpha1 on a fixed port,
# and a bystander, metrics.k8s.io/v1beta1. The victim is killed (SIGKILL) $KILLS times, after a
# random 0.5–1.5 s pause each time (a random phase against the probe schedule):
#   detection  from the kill until a GET /apis/wardle.example.com/v1alpha1/flunders through apiagg
#              gets 503 AND aggregated /apis shows the group-version "freshness":"Stale";
#   recovery   the victim is restarted on the same port after a random 0–1 s pause (a random phase
#              again); from the moment it listens until that GET
#              gets 200 AND /apis shows "Current" again.
# Polling every $POLL_MS ms. Two modes, each $KILLS kills:
#   traffic    a client loops GETs to the victim's group through apiagg (one keep-alive
#              connection, $TRAFFIC_SLEEP_MS ms between requests), so passive detection acts;
#   idle       no traffic: only the active probes can notice. The poller reads /apis alone until it
#              says Stale (a proxied request would itself trigger passive detection), then checks
#              that the group answers 503.
# Anchor: kube-aggregator's availability controller resyncs every 30 s with a 5 s probe timeout,
# i.e. up to ~35 s to detect a dead backend when no Service/Endpoints event arrives.
#
# Environment: CARGO_TARGET_DIR (default: <repo>/target), KILLS (20), POLL_MS (5),
# TRAFFIC_SLEEP_MS (1), MODES ("traffic idle"), SKIP_BUILD=1, KEEP_TMP=1, APIAGG_ARGS.
# Needs: cargo, python3.

set -euo pipefail

log() { printf '[availability] %s\n' "$*" >&2; }
die() { printf '[availability] error: %s\n' "$*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
plh="$here/proxy_load_helper.py"
helper="$here/bench_helper.py"

KILLS="${KILLS:-20}"
POLL_MS="${POLL_MS:-5}"
TRAFFIC_SLEEP_MS="${TRAFFIC_SLEEP_MS:-1}"
MODES="${MODES:-traffic idle}"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"

command -v python3 >/dev/null 2>&1 || die "'python3' not found"
source "$here/lib.sh"
build_release_bins

bench_temp availability

cp "$target_dir/release/apiagg" "$target_dir/release/sample-apiserver" "$tmp/"

busy="$(python3 "$plh" system-busy 1)"
(( busy <= 10 )) || log "WARNING: other processes kept the CPUs ${busy}% busy before starting: timings will be noisy."

read -r victim_port other_port apiagg_port <<<"$(python3 "$plh" free-ports 3)"

log "bystander sample-apiserver metrics.k8s.io/v1beta1 on 127.0.0.1:$other_port"
"$tmp/sample-apiserver" --listen "127.0.0.1:$other_port" --group metrics.k8s.io --version v1beta1 \
    --resource pods --kind PodMetrics >"$tmp/other.out" 2>"$tmp/other.log" &
pids+=("$!")
python3 "$plh" wait-http "http://127.0.0.1:$other_port/healthz" 10

cat >"$tmp/apiagg.yaml" <<EOF
listen: 127.0.0.1:$apiagg_port
services:
  - namespace: bench
    name: wardle
    port: 443
    endpoints: ["http://127.0.0.1:$victim_port"]
  - namespace: bench
    name: metrics
    port: 443
    endpoints: ["http://127.0.0.1:$other_port"]
apiServices:
EOF
for spec in "wardle.example.com v1alpha1 wardle" "metrics.k8s.io v1beta1 metrics"; do
    read -r g v s <<<"$spec"
    cat >>"$tmp/apiagg.yaml" <<EOF
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: $v.$g}
    spec: {group: $g, version: $v, groupPriorityMinimum: 1000, versionPriority: 15, insecureSkipTLSVerify: true, service: {namespace: bench, name: $s, port: 443}}
EOF
done
"$tmp/apiagg" check --config "$tmp/apiagg.yaml" >"$tmp/check.log" 2>&1 \
    || die "apiagg check rejected the config: $(cat "$tmp/check.log")"

probe_interval=500ms
if [[ "${APIAGG_ARGS:-}" =~ --probe-interval[=\ ]([^ ]+) ]]; then probe_interval="${BASH_REMATCH[1]}"; fi

results="$tmp/availability.tsv"
for mode in $MODES; do
    [[ "$mode" == traffic || "$mode" == idle ]] || die "unknown mode '$mode' (traffic, idle)"
    # A fresh apiagg per mode: no state (ejections, backoff) carried over.
    log "$mode: apiagg on 127.0.0.1:$apiagg_port ${APIAGG_ARGS:-}; victim wardle.example.com on 127.0.0.1:$victim_port; $KILLS kills, poll ${POLL_MS} ms"
    # shellcheck disable=SC2086 # APIAGG_ARGS is a list of words
    "$tmp/apiagg" serve --config "$tmp/apiagg.yaml" ${APIAGG_ARGS:-} >"$tmp/apiagg-$mode.log" 2>&1 &
    apiagg_pid=$!
    pids+=("$apiagg_pid")
    python3 "$plh" wait-http "http://127.0.0.1:$apiagg_port/healthz" 30 \
        || die "apiagg did not start: $(tail -n 20 "$tmp/apiagg-$mode.log")"
    python3 "$helper" availability "$tmp/sample-apiserver" "$victim_port" "$apiagg_port" \
        wardle.example.com v1alpha1 flunders Flunder "$KILLS" "$mode" "$POLL_MS" "$TRAFFIC_SLEEP_MS" \
        "$results" "$tmp" || die "$mode: measurement failed (KEEP_TMP=1 keeps the logs)"
    kill -TERM "$apiagg_pid" 2>/dev/null || true
    wait "$apiagg_pid" 2>/dev/null || true
done

log "$(nproc) CPUs, $(uname -r)"
python3 "$helper" report-availability "$results" "$probe_interval"
