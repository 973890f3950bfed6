# Shared by the bench scripts (sourced; each script defines `log` first).
#
# bench_temp NAME   makes "$tmp" (/tmp/NAME.XXXXXX) and an empty "pids" array; on exit every
#                   process in "pids" gets TERM, then KILL after 5 s, and "$tmp" is removed
#                   (kept with KEEP_TMP=1).
# raise_open_files  raises this shell's open-file limit to its hard limit (children inherit it)
#                   and sets "hard" to it.
# nginx_temps DIR   nginx's temporary paths under DIR, for an `http { … }` block.
# nginx_object_backend DIR PORT
#                   starts nginx on 127.0.0.1:PORT answering every path with DIR/www/object.json
#                   (its files under DIR/nginx) and adds it to "pids".
# stop_pid PID      TERM, then KILL after 5 s.

bench_temp() {
    tmp="$(mktemp -d "/tmp/$1.XXXXXX")"
    pids=()
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}

bench_cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    if [[ "${KEEP_TMP:-0}" == 1 ]]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}

raise_open_files() {
    ulimit -Hn 1048576 2>/dev/null || true
    hard="$(ulimit -Hn)"
    [[ "$hard" == unlimited ]] && hard=1048576
    ulimit -n "$hard"
}

nginx_temps() {
    local d="$1"
    printf 'client_body_temp_path %s/b; proxy_temp_path %s/p; fastcgi_temp_path %s/f; uwsgi_temp_path %s/u; scgi_temp_path %s/s;' \
        "$d" "$d" "$d" "$d" "$d"
}

nginx_object_backend() {
    local dir="$1" port="$2"
    mkdir -p "$dir/nginx"
    cat >"$dir/nginx.conf" <<CONF
worker_processes 1; pid $dir/nginx/pid; error_log $dir/nginx/error.log warn;
events { worker_connections 1024; }
http { access_log off; $(nginx_temps "$dir/nginx")
  server { listen 127.0.0.1:$port; root $dir/www;
    location / { default_type application/json; try_files /object.json =404; } } }
CONF
    nginx -p "$dir/nginx/" -c "$dir/nginx.conf" -g 'daemon off;' &
    pids+=($!)
}

stop_pid() {
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
}

# Builds the release apiagg and sample-apiserver in $target_dir (unless SKIP_BUILD=1) and checks
# both are there. Uses the caller's log, die, repo and target_dir.
build_release_bins() {
    local build="cargo build --release -p apiagg-gateway -p apiagg-tests --bins"
    if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
        command -v cargo >/dev/null 2>&1 \
            || die "'cargo' not found (or set SKIP_BUILD=1 with a release build in $target_dir)"
        log "building apiagg and sample-apiserver (release) in $target_dir"
        (cd "$repo" && CARGO_TARGET_DIR="$target_dir" $build) || die "cargo build failed"
    fi
    local bin
    for bin in apiagg sample-apiserver; do
        [[ -x "$target_dir/release/$bin" ]] || die "$target_dir/release/$bin not found ($build)"
    done
}
