#!/usr/bin/env bash
# APIService API benchmark: writes per second and latency through the API on the embedded store,
# time from a create to the first proxied 200, memory with 10,000 stored APIServices.
# Usage (from the repo root): tests/bench/apiservice-api.sh   (SKIP_BUILD=1 to reuse the build;
# ETCD=1 to measure the etcd store, with an etcd started here from Debian's etcd-server)
# Needs: cargo, nginx, python3 (and etcd for ETCD=1).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
helper="$here/proxy_load_helper.py"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
[[ "${SKIP_BUILD:-0}" == 1 ]] || (cd "$repo" && cargo build --release -p apiagg-gateway --bins)
tmp="$(mktemp -d /tmp/apiservice-api.XXXXXX)"
chmod 755 "$tmp"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; sleep 0.3; rm -rf "$tmp"; }
trap cleanup EXIT
read -r backend_port apiagg_port etcd_port peer_port <<<"$(python3 "$helper" free-ports 4)"
mkdir -p "$tmp/www" "$tmp/nginx"
python3 "$helper" body "$tmp/www/object.json"
chmod -R a+rX "$tmp"
cat >"$tmp/nginx.conf" <<CONF
worker_processes 1; pid $tmp/nginx/pid; error_log $tmp/nginx/error.log warn;
events { worker_connections 1024; }
http { access_log off; client_body_temp_path $tmp/nginx/b; proxy_temp_path $tmp/nginx/p;
  fastcgi_temp_path $tmp/nginx/f; uwsgi_temp_path $tmp/nginx/u; scgi_temp_path $tmp/nginx/s;
  server { listen 127.0.0.1:$backend_port; root $tmp/www;
    location / { default_type application/json; try_files /object.json =404; } } }
CONF
nginx -p "$tmp/nginx/" -c "$tmp/nginx.conf" -g 'daemon off;' &
pids+=("$!")
cat >"$tmp/apiagg.yaml" <<CONF
listen: 127.0.0.1:$apiagg_port
services:
  - {namespace: bench, name: widgets, port: 443, endpoints: ["http://127.0.0.1:$backend_port"]}
CONF
store=(--data-dir "$tmp/data")
if [[ "${ETCD:-0}" == 1 ]]; then
    etcd --data-dir "$tmp/etcd" --listen-client-urls "http://127.0.0.1:$etcd_port" \
        --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
        --initial-cluster "default=http://127.0.0.1:$peer_port" >"$tmp/etcd.log" 2>&1 &
    pids+=("$!")
    python3 "$helper" wait-http "http://127.0.0.1:$etcd_port/health" 20
    store=(--etcd-servers "http://127.0.0.1:$etcd_port")
fi
"$target_dir/release/apiagg" serve --config "$tmp/apiagg.yaml" "${store[@]}" --threads 1 \
    >"$tmp/apiagg.log" 2>&1 &
pids+=("$!")
apiagg_pid=$!
python3 "$helper" wait-http "http://127.0.0.1:$apiagg_port/readyz" 30
python3 "$here/apiservice-api.py" "$apiagg_port" "http://127.0.0.1:$backend_port" "$apiagg_pid"
echo "store: ${store[*]}; $(du -sh "$tmp/data" "$tmp/etcd" 2>/dev/null | cut -f1 | tr '\n' ' ')on $(df --output=fstype "$tmp" | tail -1)"
