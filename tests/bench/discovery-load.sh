#!/usr/bin/env bash
# Aggregated discovery load benchmark: `GET /apis` as kubectl asks for it, apiagg against nginx
# serving the very same bytes as a static file, same load generator, one run.
#
# Usage (from the repo root):   tests/bench/discovery-load.sh
#
# Setup:
#   delegate   sample-apiserver --fixtures <fixtures>/kubernetes/discovery (kube-apiserver's
#              aggregated /apis: 22 groups, 71 resources)
#   backends   sample-apiserver --fixtures <fixtures>/extension-apiservers/oauth-apiserver/discovery
#              (oauth.openshift.io/v1 + user.openshift.io/v1), a generated wardle.example.com/v1alpha1
#              and a generated metrics.k8s.io/v1beta1: 3 Services, 4 APIServices
#   apiagg     release build, --threads 1
#   nginx      worker_processes 1, serving the aggregated /apis bytes fetched once from apiagg
#              (same Content-Type, plus ETag, Vary: Accept and Cache-Control: public like apiagg)
# Each server is measured with wrk (1 thread, $CONNECTIONS connections, $WARMUP s warm-up then
# $DURATION s measured) sending kubectl's Accept header:
#   application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,
#   application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json
# It prints RPS, p50, p99, the server's CPU time per request (utime+stime of the process and its
# children over the measured window / requests) and the ratios apiagg/nginx (goal: RPS ≥ 1.0).
#
# CPU placement as in proxy-load.sh (override with LOAD_CPU, SERVER_CPU, BACKEND_CPU):
#   core 1  the server under test alone (apiagg --threads 1, or nginx with 1 worker);
#   core 0  wrk, and the delegate and backends, which only see apiagg's probes and discovery
#           refreshes during the measurement (the answer comes from apiagg's precomputed bytes).
#
# Environment: CARGO_TARGET_DIR (default: <repo>/target), DURATION (10), WARMUP (2),
# CONNECTIONS (64), APIAGG_FIXTURES (default: <repo>/../shared/fixtures), SKIP_BUILD=1 (use the
# existing release binaries), KEEP_TMP=1 (keep the temp dir), APIAGG_ARGS (extra `apiagg serve`
# arguments).
# Needs: cargo, wrk, nginx, python3, taskset.   apt-get install -y wrk nginx

set -euo pipefail

log() { printf '[discovery-load] %s\n' "$*" >&2; }
die() { printf '[discovery-load] error: %s\n' "$*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
plh="$here/proxy_load_helper.py"
helper="$here/bench_helper.py"

DURATION="${DURATION:-10}"
WARMUP="${WARMUP:-2}"
CONNECTIONS="${CONNECTIONS:-64}"
LOAD_CPU="${LOAD_CPU:-0}"
SERVER_CPU="${SERVER_CPU:-1}"
BACKEND_CPU="${BACKEND_CPU:-0}"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
fixtures="${APIAGG_FIXTURES:-$repo/../shared/fixtures}"
ACCEPT='application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json'

for tool in wrk nginx python3 taskset; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (Debian: apt-get install -y wrk nginx python3 util-linux)"
done
[[ "${SKIP_BUILD:-0}" == 1 ]] || command -v cargo >/dev/null 2>&1 || die "'cargo' not found (or set SKIP_BUILD=1 with a release build in $target_dir)"
[[ -f "$fixtures/kubernetes/discovery/aggregated_v2.json" ]] || die "fixtures not found in $fixtures (set APIAGG_FIXTURES)"
ncpu="$(nproc)"
for c in "$LOAD_CPU" "$SERVER_CPU" "$BACKEND_CPU"; do
    (( c < ncpu )) || die "CPU $c does not exist (this machine has $ncpu); set LOAD_CPU/SERVER_CPU/BACKEND_CPU"
done
nginx_bin="$(command -v nginx)"
clk_tck="$(getconf CLK_TCK)"

# ---------------------------------------------------------------------------------------------
# Build.
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    log "building apiagg and sample-apiserver (release) in $target_dir"
    (cd "$repo" && CARGO_TARGET_DIR="$target_dir" cargo build --release -p apiagg-gateway -p apiagg-tests --bins) \
        || die "cargo build failed"
fi
for bin in apiagg sample-apiserver; do
    [[ -x "$target_dir/release/$bin" ]] || die "$target_dir/release/$bin not found (cargo build --release -p apiagg-gateway -p apiagg-tests --bins)"
done

# ---------------------------------------------------------------------------------------------
# Temp dir, processes, cleanup.
source "$here/lib.sh"
bench_temp discovery-load
chmod 755 "$tmp" # nginx workers run as nobody and read the static file

# Private copies: other builds in the same target dir cannot swap the binaries mid-run.
cp "$target_dir/release/apiagg" "$target_dir/release/sample-apiserver" "$tmp/"
apiagg_bin="$tmp/apiagg"
sample_bin="$tmp/sample-apiserver"

busy="$(python3 "$plh" system-busy 1)"
if (( busy > 10 )); then
    log "WARNING: before starting, other processes kept the CPUs ${busy}% busy: RPS and latency will be noisy."
fi

read -r delegate_port oauth_port wardle_port metrics_port apiagg_port nginx_port <<<"$(python3 "$plh" free-ports 6)"

start_sample() { # $1 = name, $2 = port, rest = sample-apiserver arguments
    local name="$1" port="$2"
    shift 2
    taskset -c "$BACKEND_CPU" "$sample_bin" --listen "127.0.0.1:$port" "$@" \
        >"$tmp/$name.out" 2>"$tmp/$name.log" &
    pids+=("$!")
    python3 "$plh" wait-http "http://127.0.0.1:$port/healthz" 10 \
        || die "$name did not start: $(tail -n 5 "$tmp/$name.log")"
}

log "delegate sample-apiserver (kubernetes discovery fixtures) on 127.0.0.1:$delegate_port (CPU $BACKEND_CPU)"
start_sample delegate "$delegate_port" --fixtures "$fixtures/kubernetes/discovery"
log "backends on CPU $BACKEND_CPU: oauth-apiserver fixtures :$oauth_port, wardle :$wardle_port, metrics :$metrics_port"
start_sample oauth "$oauth_port" --group oauth.openshift.io --version v1 --resource oauthclients \
    --kind OAuthClient --fixtures "$fixtures/extension-apiservers/oauth-apiserver/discovery"
start_sample wardle "$wardle_port"
start_sample metrics "$metrics_port" --group metrics.k8s.io --version v1beta1 --resource pods \
    --kind PodMetrics --namespaced

mkdir -p "$tmp/gw"
python3 "$helper" discovery-config "$tmp/gw" "$apiagg_port" "http://127.0.0.1:$delegate_port" \
    "oauth=http://127.0.0.1:$oauth_port" "wardle=http://127.0.0.1:$wardle_port" \
    "metrics=http://127.0.0.1:$metrics_port"
"$apiagg_bin" check --config "$tmp/gw/apiagg.yaml" >"$tmp/gw/check.log" 2>&1 \
    || die "apiagg check rejected the config: $(cat "$tmp/gw/check.log")"
log "apiagg on 127.0.0.1:$apiagg_port (CPU $SERVER_CPU, --threads 1 ${APIAGG_ARGS:-})"
# shellcheck disable=SC2086 # APIAGG_ARGS is a list of words
taskset -c "$SERVER_CPU" "$apiagg_bin" serve --config "$tmp/gw/apiagg.yaml" --threads 1 \
    ${APIAGG_ARGS:-} >"$tmp/gw/apiagg.log" 2>&1 &
apiagg_pid=$!
pids+=("$apiagg_pid")
python3 "$plh" wait-http "http://127.0.0.1:$apiagg_port/readyz" 30 \
    || die "apiagg did not become ready: $(tail -n 20 "$tmp/gw/apiagg.log")"

# ---------------------------------------------------------------------------------------------
# The aggregated /apis bytes, once, from apiagg; nginx serves exactly these.
mkdir -p "$tmp/www" "$tmp/nginx/tmp"
read -r status ctype etag <<<"$(python3 "$helper" fetch "http://127.0.0.1:$apiagg_port/apis" "$ACCEPT" "$tmp/www/apis.json")"
[[ "$ctype" == 'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList' ]] \
    || die "apiagg answered /apis with Content-Type '$ctype', not aggregated v2"
groups="$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d["items"]), sum(len(v["resources"]) for i in d["items"] for v in i["versions"]), " ".join(sorted({v.get("freshness","-") for i in d["items"] for v in i["versions"]})))' "$tmp/www/apis.json")"
read -r n_groups n_resources freshness <<<"$groups"
[[ "$freshness" == Current ]] || die "not every group-version is Current in apiagg's /apis: $freshness"
bytes="$(stat -c %s "$tmp/www/apis.json")"
log "aggregated /apis from apiagg: $bytes bytes, $n_groups groups, $n_resources resources, all Current, ETag ${etag:0:20}…"
chmod -R a+rX "$tmp/www"

cat >"$tmp/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $tmp/nginx/tmp/nginx.pid;
error_log $tmp/nginx/tmp/error.log warn;
worker_rlimit_nofile 65536;
events { worker_connections 16384; multi_accept on; }
http {
    access_log off;
    keepalive_requests 10000000;
    keepalive_timeout 75s;
    sendfile on;
    tcp_nopush on;
    etag off;
    client_body_temp_path $tmp/nginx/tmp/body;
    proxy_temp_path $tmp/nginx/tmp/proxy;
    fastcgi_temp_path $tmp/nginx/tmp/fastcgi;
    uwsgi_temp_path $tmp/nginx/tmp/uwsgi;
    scgi_temp_path $tmp/nginx/tmp/scgi;
    server {
        listen 127.0.0.1:$nginx_port backlog=4096;
        root $tmp/www;
        open_file_cache max=16;
        open_file_cache_valid 1h;
        location = /apis {
            default_type 'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList';
            add_header ETag '$etag';
            add_header Vary Accept;
            add_header Cache-Control public;
            try_files /apis.json =404;
        }
    }
}
EOF
"$nginx_bin" -t -q -p "$tmp/nginx/" -c "$tmp/nginx/nginx.conf" 2>"$tmp/nginx/check.log" \
    || die "nginx config rejected: $(cat "$tmp/nginx/check.log")"

# ---------------------------------------------------------------------------------------------
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
printf 'case\trps\tp50_us\tp99_us\tcpu_pct\tus_per_req\trequests\tload_core_pct\tserver_core_pct\n' >"$results"

measure() { # $1 = case name, $2 = url, $3 = server pid
    local name="$1" url="$2" pid="$3" out p0 p1 c0 c1 line
    python3 "$helper" fetch "$url" "$ACCEPT" "$tmp/check.json" >/dev/null
    cmp -s "$tmp/check.json" "$tmp/www/apis.json" || die "$name: /apis body differs from apiagg's first answer"
    log "$name: warm-up ${WARMUP}s, then ${DURATION}s with $CONNECTIONS connections: $url"
    taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d"${WARMUP}s" -H "Accept: $ACCEPT" "$url" >/dev/null
    c0="$(python3 "$plh" core-ticks "$LOAD_CPU" "$SERVER_CPU")"
    p0="$(python3 "$plh" cpu-ticks "$pid")"
    out="$(taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --timeout 5s \
        -H "Accept: $ACCEPT" -s "$tmp/report.lua" "$url")"
    p1="$(python3 "$plh" cpu-ticks "$pid")"
    c1="$(python3 "$plh" core-ticks "$LOAD_CPU" "$SERVER_CPU")"
    line="$(grep '^BENCH ' <<<"$out")" || die "$name: no result from wrk: $out"
    local requests duration_us p50_us p99_us errors status_errors
    eval "$(sed 's/^BENCH //; s/ /;/g' <<<"$line")"
    if (( errors > 0 || status_errors > 0 )); then
        die "$name: $errors socket errors and $status_errors non-2xx answers: $out"
    fi
    (( requests > 0 )) || die "$name: no requests completed"
    python3 "$helper" wrk-row "$name" "$line" "$p0" "$p1" "$clk_tck" "$c0" "$c1" >>"$results"
    tail -n1 "$results" | awk -F'\t' '{printf "[discovery-load]   %.0f RPS, p50 %.2f ms, p99 %.2f ms, CPU %s%%, %s µs/req; load core %s%%, server core %s%% busy\n", $2, $3/1000, $4/1000, $5, $6, $8, $9}' >&2
}

measure apiagg "http://127.0.0.1:$apiagg_port/apis" "$apiagg_pid"

log "nginx (static file, 1 worker) on 127.0.0.1:$nginx_port (CPU $SERVER_CPU)"
taskset -c "$SERVER_CPU" "$nginx_bin" -p "$tmp/nginx/" -c "$tmp/nginx/nginx.conf" -g 'daemon off;' \
    >"$tmp/nginx/stdout.log" 2>&1 &
nginx_pid=$!
pids+=("$nginx_pid")
python3 "$plh" wait-http "http://127.0.0.1:$nginx_port/apis" 10
measure nginx "http://127.0.0.1:$nginx_port/apis" "$nginx_pid"

# ---------------------------------------------------------------------------------------------
log "body: $bytes bytes ($n_groups groups, $n_resources resources); wrk -t1 -c$CONNECTIONS -d${DURATION}s on CPU $LOAD_CPU; server on CPU $SERVER_CPU; $(nproc) CPUs, $(uname -r)"
python3 "$helper" report-discovery "$results"
