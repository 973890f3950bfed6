# Shared by the bench scripts (sourced; each script defines `log` first).
#
# bench_temp NAME   makes "$tmp" (/tmp/NAME.XXXXXX) and an empty "pids" array; on exit every
#                   process in "pids" gets TERM, then KILL after 5 s, and "$tmp" is removed
#                   (kept with KEEP_TMP=1).

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
