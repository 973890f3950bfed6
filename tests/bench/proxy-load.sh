#!/usr/bin/env bash
# Proxy load benchmark: apiagg against nginx, same load generator, same backend, one run.
#
# Usage (from the repo root):   tests/bench/proxy-load.sh
#
# Cases, each measured with wrk (1 thread, $CONNECTIONS connections, $WARMUP s warm-up then
# $DURATION s measured) doing GET /apis/<group>/v1/namespaces/default/widgets/widget-1, whose
# answer is a 1 KiB JSON file served by a backend nginx:
#   direct       wrk -> backend
#   nginx        wrk -> nginx (Debian; plain reverse proxy, HTTP/1.1 keepalive pool to the backend)
#   apiagg-1     wrk -> apiagg (release build) with 1 APIService routed to the backend
#   apiagg-1000  wrk -> apiagg with 1,000 APIServices (1,000 groups; the measured one among them)
#   apiagg-1-nometrics  (opt-in, METRICS_COST=1) apiagg-1 again with the hidden
#                `--disable-request-metrics`, right after apiagg-1: what per-request metrics cost
#                (goal: ≤ 3% of CPU µs/request and of RPS)
# It prints RPS, p50, p99, the proxy's CPU time per request (utime+stime from /proc/<pid>/stat of
# the proxy and its child processes, over the measured window, divided by the requests wrk
# counted) and the proxy's CPU use, the backend's CPU per request, then the ratios against the
# goals (apiagg/nginx RPS >= 1.2, p99 no worse than nginx, 1000/1 APIServices RPS >= 0.95).
# RPS varies about +-15% run to run on a small machine; CPU µs/request is the stable figure.
#
# CPU placement (2-core machine; override with LOAD_CPU, PROXY_CPU, BACKEND_CPU):
#   core 1  the proxy under test alone (nginx: worker_processes 1; apiagg: --threads 1), so
#           its CPU time is its own and it is the component that saturates;
#   core 0  wrk and the backend nginx. Sharing wrk's core disturbs least: the backend serving a
#           static file costs less per request than the proxy, so core 0 keeps headroom while
#           core 1 is at 100%. Putting the backend on the proxy's core instead would halve the
#           proxy's capacity and measure the backend as much as the proxy.
#   The direct case uses the same placement (wrk and backend on core 0), so it is a reference
#   point for the load generator + backend, not a proxy figure.
#
# The 1,000 APIServices have 1,000 Services (all pointing at the same backend). apiagg probes every
# endpoint of every APIService (--probe-interval, default 500ms), i.e. ~2,000 probe GETs/s that
# run on the proxy's core and show up in its CPU; APIAGG_ARGS="--probe-interval 1h" removes them.
# Other load on the machine (builds) ruins RPS and inflates µs/request: the script warns when the
# CPUs are busy before it starts, and the "proxy core" column shows foreign load during a case.
#
# Environment: CARGO_TARGET_DIR (default: <repo>/target), DURATION (10), WARMUP (2),
# CONNECTIONS (64), APISERVICES (1000), SKIP_BUILD=1 (use the existing release binary),
# KEEP_TMP=1 (keep the temp dir with configs and logs), APIAGG_ARGS (extra `apiagg serve`
# arguments, e.g. "--probe-interval 10s", to see what a feature costs), METRICS_COST=1 (add the
# apiagg-1-nometrics case), CASES (the cases to run, default "direct nginx apiagg-1 apiagg-many";
# e.g. CASES=apiagg-1 METRICS_COST=1 for the metrics cost alone).
# Needs: cargo, wrk, nginx, python3, taskset (HTTP checks are done with Python).
#   apt-get install -y wrk nginx

set -euo pipefail

log() { printf '[proxy-load] %s\n' "$*" >&2; }
die() { printf '[proxy-load] error: %s\n' "$*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
helper="$here/proxy_load_helper.py"

DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-2}"
CONNECTIONS="${CONNECTIONS:-64}"
APISERVICES="${APISERVICES:-1000}"
LOAD_CPU="${LOAD_CPU:-0}"
PROXY_CPU="${PROXY_CPU:-1}"
BACKEND_CPU="${BACKEND_CPU:-0}"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
CASES="${CASES:-direct nginx apiagg-1 apiagg-many}"
has_case() { [[ " $CASES " == *" $1 "* ]]; }

for tool in wrk nginx python3 taskset; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (Debian: apt-get install -y wrk nginx python3 util-linux)"
done
[[ "${SKIP_BUILD:-0}" == 1 ]] || command -v cargo >/dev/null 2>&1 || die "'cargo' not found (or set SKIP_BUILD=1 with a release build in $target_dir)"
ncpu="$(nproc)"
for c in "$LOAD_CPU" "$PROXY_CPU" "$BACKEND_CPU"; do
    (( c < ncpu )) || die "CPU $c does not exist (this machine has $ncpu); set LOAD_CPU/PROXY_CPU/BACKEND_CPU"
done
nginx_bin="$(command -v nginx)"
clk_tck="$(getconf CLK_TCK)"

# ---------------------------------------------------------------------------------------------
# Build.
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    log "building apiagg (release) in $target_dir"
    (cd "$repo" && CARGO_TARGET_DIR="$target_dir" cargo build --release -p apiagg-gateway --bins) \
        || die "cargo build failed"
fi
apiagg_bin="$target_dir/release/apiagg"
[[ -x "$apiagg_bin" ]] || die "$apiagg_bin not found (build with: cargo build --release -p apiagg-gateway --bins)"

# ---------------------------------------------------------------------------------------------
# Temp dir, processes, cleanup.
tmp="$(mktemp -d /tmp/proxy-load.XXXXXX)"
chmod 755 "$tmp" # nginx workers run as nobody and read the static file
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    if [[ "${KEEP_TMP:-0}" == 1 ]]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A private copy: other builds in the same target dir cannot swap the binary mid-run.
cp "$apiagg_bin" "$tmp/apiagg"
apiagg_bin="$tmp/apiagg"

busy="$(python3 "$helper" system-busy 1)"
if (( busy > 10 )); then
    log "WARNING: before starting, other processes kept the CPUs ${busy}% busy: RPS and latency will be"
    log "         noisy (CPU µs/request is less affected). Run on an idle machine for RPS figures."
fi

read -r backend_port nginx_port apiagg_port <<<"$(python3 "$helper" free-ports 3)"
group="bench.example.com"
path="/apis/$group/v1/namespaces/default/widgets/widget-1"

# ---------------------------------------------------------------------------------------------
# Backend: nginx serving one 1 KiB JSON file for every path.
mkdir -p "$tmp/backend/www" "$tmp/backend/tmp" "$tmp/front/tmp"
python3 "$helper" body "$tmp/backend/www/object.json"
chmod -R a+rX "$tmp/backend"
body_file="$tmp/backend/www/object.json"

nginx_common() { # $1 = temp dir
    cat <<EOF
pid $1/nginx.pid;
error_log $1/error.log warn;
worker_rlimit_nofile 65536;
events { worker_connections 16384; multi_accept on; }
EOF
}
nginx_http_common() { # $1 = temp dir
    cat <<EOF
    access_log off;
    keepalive_requests 10000000;
    keepalive_timeout 75s;
    client_body_temp_path $1/body;
    proxy_temp_path $1/proxy;
    fastcgi_temp_path $1/fastcgi;
    uwsgi_temp_path $1/uwsgi;
    scgi_temp_path $1/scgi;
EOF
}

cat >"$tmp/backend/nginx.conf" <<EOF
worker_processes 1;
$(nginx_common "$tmp/backend/tmp")
http {
$(nginx_http_common "$tmp/backend/tmp")
    server {
        listen 127.0.0.1:$backend_port backlog=4096;
        root $tmp/backend/www;
        open_file_cache max=16;
        open_file_cache_valid 1h;
        location / {
            default_type application/json;
            try_files /object.json =404;
        }
    }
}
EOF

cat >"$tmp/front/nginx.conf" <<EOF
worker_processes 1;
$(nginx_common "$tmp/front/tmp")
http {
$(nginx_http_common "$tmp/front/tmp")
    upstream backend {
        server 127.0.0.1:$backend_port;
        keepalive 128;
        keepalive_requests 10000000;
    }
    server {
        listen 127.0.0.1:$nginx_port backlog=4096;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF

start_nginx() { # $1 = name, $2 = cpu
    "$nginx_bin" -t -q -p "$tmp/$1/" -c "$tmp/$1/nginx.conf" 2>"$tmp/$1/check.log" \
        || die "nginx ($1) config rejected: $(cat "$tmp/$1/check.log")"
    taskset -c "$2" "$nginx_bin" -p "$tmp/$1/" -c "$tmp/$1/nginx.conf" -g 'daemon off;' \
        >"$tmp/$1/stdout.log" 2>&1 &
    pids+=("$!")
    eval "${1}_pid=$!"
}

stop_pid() { # $1 = pid
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
}

log "backend nginx on 127.0.0.1:$backend_port (CPU $BACKEND_CPU)"
start_nginx backend "$BACKEND_CPU"
python3 "$helper" wait-http "http://127.0.0.1:$backend_port$path" 10
python3 "$helper" check "http://127.0.0.1:$backend_port$path" "$body_file"

# ---------------------------------------------------------------------------------------------
# wrk with a Lua reporter (latency in µs).
cat >"$tmp/report.lua" <<'EOF'
done = function(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        "BENCH requests=%d duration_us=%d p50_us=%d p99_us=%d errors=%d status_errors=%d\n",
        summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
        e.connect + e.read + e.write + e.timeout, e.status))
end
EOF

results="$tmp/results.tsv"
printf 'case\trps\tp50_us\tp99_us\tproxy_cpu_pct\tproxy_us_per_req\tbackend_us_per_req\trequests\tload_core_pct\tproxy_core_pct\n' >"$results"

measure() { # $1 = case name, $2 = url, $3 = proxy pid or ""
    local name="$1" url="$2" proxy="$3" out p0 p1 b0 b1 c0 c1
    python3 "$helper" check "$url" "$body_file"
    log "$name: warm-up ${WARMUP}s, then ${DURATION}s with $CONNECTIONS connections: $url"
    taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d"${WARMUP}s" "$url" >/dev/null
    b0="$(python3 "$helper" cpu-ticks "$backend_pid")"
    c0="$(python3 "$helper" core-ticks "$LOAD_CPU" "$PROXY_CPU")"
    [[ -n "$proxy" ]] && p0="$(python3 "$helper" cpu-ticks "$proxy")"
    out="$(taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --timeout 5s \
        -s "$tmp/report.lua" "$url")"
    [[ -n "$proxy" ]] && p1="$(python3 "$helper" cpu-ticks "$proxy")"
    b1="$(python3 "$helper" cpu-ticks "$backend_pid")"
    c1="$(python3 "$helper" core-ticks "$LOAD_CPU" "$PROXY_CPU")"
    local line
    line="$(grep '^BENCH ' <<<"$out")" || die "$name: no result from wrk: $out"
    local requests duration_us p50_us p99_us errors status_errors
    eval "$(sed 's/^BENCH //; s/ /;/g' <<<"$line")"
    if (( errors > 0 || status_errors > 0 )); then
        die "$name: $errors socket errors and $status_errors non-2xx answers: $out"
    fi
    (( requests > 0 )) || die "$name: no requests completed"
    python3 - "$name" "$requests" "$duration_us" "$p50_us" "$p99_us" "${p0:-}" "${p1:-}" \
        "$b0" "$b1" "$clk_tck" "$c0" "$c1" >>"$results" <<'EOF'
import sys
name, req, dur, p50, p99, p0, p1, b0, b1, hz, c0, c1 = sys.argv[1:]
core = []
for a, b in zip(c0.split(), c1.split()):
    (ab, at), (bb, bt) = map(int, a.split(",")), map(int, b.split(","))
    core.append(f"{(bb - ab) * 100 / max(1, bt - at):.1f}")
req, dur, hz = int(req), int(dur), int(hz)
us = lambda t0, t1: (int(t1) - int(t0)) * 1e6 / hz / req
if p0:
    cpu_pct = f"{(int(p1) - int(p0)) * 1e6 / hz / dur * 100:.1f}"
    per_req = f"{us(p0, p1):.2f}"
else:
    cpu_pct = per_req = "-"
print(f"{name}\t{req * 1e6 / dur:.1f}\t{p50}\t{p99}\t{cpu_pct}\t{per_req}\t{us(b0, b1):.2f}\t{req}\t{core[0]}\t{core[1]}")
EOF
    tail -n1 "$results" | awk -F'\t' '{printf "[proxy-load]   %.0f RPS, p50 %.2f ms, p99 %.2f ms, proxy CPU %s%%, %s µs/req; load core %s%%, proxy core %s%% busy\n", $2, $3/1000, $4/1000, $5, $6, $9, $10}' >&2
}

# ---------------------------------------------------------------------------------------------
# 1. direct
has_case direct && measure direct "http://127.0.0.1:$backend_port$path" ""

# 2. nginx
if has_case nginx; then
    log "nginx reverse proxy on 127.0.0.1:$nginx_port (CPU $PROXY_CPU, 1 worker)"
    start_nginx front "$PROXY_CPU"
    python3 "$helper" wait-http "http://127.0.0.1:$nginx_port$path" 10
    measure nginx "http://127.0.0.1:$nginx_port$path" "$front_pid"
    stop_pid "$front_pid"
fi

# 3. and 4. apiagg with 1 and with $APISERVICES APIServices
run_apiagg() { # $1 = case name, $2 = number of APIServices, $3 = extra apiagg arguments
    local dir="$tmp/$1" pid
    mkdir -p "$dir"
    python3 "$helper" apiagg-config "$dir" "$apiagg_port" "127.0.0.1:$backend_port" "$2" "$group"
    "$apiagg_bin" check --config "$dir/apiagg.yaml" >"$dir/check.log" 2>&1 \
        || die "apiagg check rejected the config: $(cat "$dir/check.log")"
    log "apiagg ($2 APIServices) on 127.0.0.1:$apiagg_port (CPU $PROXY_CPU, --threads 1 ${APIAGG_ARGS:-} ${3:-})"
    # shellcheck disable=SC2086 # APIAGG_ARGS is a list of words
    taskset -c "$PROXY_CPU" "$apiagg_bin" serve --config "$dir/apiagg.yaml" --threads 1 \
        ${APIAGG_ARGS:-} ${3:-} >"$dir/apiagg.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    python3 "$helper" wait-http "http://127.0.0.1:$apiagg_port/readyz" 30 \
        || die "apiagg did not become ready: $(tail -n 20 "$dir/apiagg.log")"
    measure "$1" "http://127.0.0.1:$apiagg_port$path" "$pid"
    stop_pid "$pid"
}
has_case apiagg-1 && run_apiagg apiagg-1 1
[[ "${METRICS_COST:-0}" == 1 ]] && run_apiagg apiagg-1-nometrics 1 --disable-request-metrics
has_case apiagg-many && run_apiagg "apiagg-$APISERVICES" "$APISERVICES"

# ---------------------------------------------------------------------------------------------
log "wrk -t1 -c$CONNECTIONS -d${DURATION}s on CPU $LOAD_CPU; proxy on CPU $PROXY_CPU; backend on CPU $BACKEND_CPU; $(nproc) CPUs, $(uname -r)"
python3 "$helper" report "$results"
