# Sourced by side-by-side.sh once its fronts serve and `row` is defined: the rows "instr",
# "load", "watch", "rps" and "outage" (issue 45), each run when ROWS names it. Uses its globals
# (tmp, url, pid, pids, running, rows, notes, helper, n1, n2, n_h2, n_h1, secs, rate, token,
# name, object) and functions (start_front, stop_front, restart_front, wait_front, pin_rest, row,
# log).

# ------------------------------------------------------------------ instructions (callgrind)
cg_total() { # DUMP-BASE: the count of the newest dump
    local f
    f="$(ls -t "$1".* 2>/dev/null | grep -v '\.log$' | head -1)"
    python3 "$helper" cg-total "$f"
}
cg_window() { # PID BASE PROTO N: instructions on one fresh connection of N requests (and its seconds)
    local p=$1 base=$2 proto=$3 n=$4 t0 t1 codes
    python3 "$helper" urls "$tmp/urls.$n" "$CURRENT_URL$object" "$n"
    callgrind_control -z "$p" >/dev/null
    t0=$(date +%s.%N)
    codes="$(taskset -c 0 curl -sS "--$proto" --cacert serving-ca.crt --cert bench.crt --key bench.key \
        -w '%{http_code}\n' -K "$tmp/urls.$n" 2>/dev/null | sort | uniq -c | tr '\n' ' ' || true)"
    t1=$(date +%s.%N)
    callgrind_control -d "$p" >/dev/null
    sleep 0.5
    [[ "$codes" == *" $n 200 "* || "$codes" == "$(printf '%7d 200 ' "$n")" ]] \
        || log "  warning: $proto answers: $codes"
    echo "$(cg_total "$base") $(python3 -c "print($t1 - $t0)")"
}
cg_idle() { # PID BASE SECONDS
    callgrind_control -z "$1" >/dev/null
    sleep "$3"
    callgrind_control -d "$1" >/dev/null
    sleep 0.5
    cg_total "$2"
}
measure_instructions() { # FRONT
    local f=$1 base="$tmp/cg.$1" p a ta b tb idle proto per
    stop_front "$f"
    log "$f under callgrind (start-up is slow for the Go servers)"
    # Go's asynchronous preemption (SIGURG) trips callgrind's signal bookkeeping
    # (threads.c: "sigNum == current_state.sig" failed): off for the Go servers measured.
    GODEBUG=asyncpreemptoff=1 start_front "$f" taskset -c 1 valgrind --tool=callgrind --instr-atstart=no \
        --callgrind-out-file="$base.%p" --log-file="$base.vg.log"
    p=${pid[$f]}
    wait_front "$f" 900
    callgrind_control -i on "$p" >/dev/null
    CURRENT_URL="${url[$f]}"
    # warm-up on both protocols
    cg_window "$p" "$base" http1.1 10 >/dev/null
    cg_window "$p" "$base" http2 10 >/dev/null
    for proto in http1.1 http2; do
        read -r a ta <<<"$(cg_window "$p" "$base" "$proto" "$n1")"
        read -r b tb <<<"$(cg_window "$p" "$base" "$proto" "$n2")"
        idle="$(cg_idle "$p" "$base" "$(python3 -c "print(max(0.5, $tb - $ta))")")"
        per=$(python3 -c "print(round(($b - $a - $idle) / ($n2 - $n1)))")
        log "  $f $proto: $a ($n1, ${ta}s) $b ($n2, ${tb}s) idle $idle: $per per request"
        local label=HTTP/1.1
        [[ $proto == http2 ]] && label=HTTP/2
        row "instructions per GET, TLS + $label" "$f" "$per"
        [[ "$proto" == http2 ]] && row "  (instr. idle over the window)" "$f" "$idle" lower
        true
    done
    callgrind_control -i off "$p" >/dev/null 2>&1 || true
    stop_front "$f"
    start_front "$f"
    wait_front "$f" 180
}
if [[ "$rows" == *" instr "* ]]; then
    for f in "${running[@]}"; do
        # callgrind 3.19 aborts in kube-apiserver once requests arrive (threads.c:247, "sigNum ==
        # vgCallgrind_current_state.sig", with GODEBUG=asyncpreemptoff=1 too) and this VM has no
        # hardware counters (perf: instructions:u not supported): the Go servers are measured by
        # CPU time only, unless GO_CALLGRIND=1.
        if [[ $f == kube || $f == agg ]] && [[ "${GO_CALLGRIND:-0}" != 1 ]]; then
            notes+=("instructions at $f: not measured (callgrind aborts in the Go server once requests arrive: threads.c:247 'sigNum == vgCallgrind_current_state.sig', GODEBUG=asyncpreemptoff=1 too; no hardware counters in this VM); compare CPU µs per request instead")
            continue
        fi
        measure_instructions "$f"
    done
    notes+=("instructions: N1=$n1, N2=$n2 requests on one connection each (curl, client certificate), callgrind --instr-atstart=no, windows by callgrind_control -z/-d; the idle instructions over the extra window are subtracted")
fi

# -------------------------------------------------------- CPU and latency at a fixed rate
measure_load() { # FRONT
    local f=$1 p=${pid[$1]} proto c0 c1 lat n=$((rate * secs))
    pin_rest
    taskset -a -p -c 1 "$p" >/dev/null
    for proto in h1 h2; do
        rm -f "$tmp/lat.$f.$proto"
        c0=$(python3 "$helper" cpu-ns "$p")
        local h1=()
        [[ $proto == h1 ]] && h1=(--h1)
        taskset -c 0 h2load "${h1[@]}" -c 4 -m 1 --rps $((rate / 4)) -n "$n" \
            -H "Authorization: Bearer $token" --log-file="$tmp/lat.$f.$proto" "${url[$f]}$object" \
            >"$tmp/h2load.$f.$proto" 2>&1 || true
        c1=$(python3 "$helper" cpu-ns "$p")
        read -r p50 p99 count ok <<<"$(python3 "$helper" latency "$tmp/lat.$f.$proto")"
        log "  $f $proto at $rate/s: $count requests ($ok 200), p50 $p50 µs p99 $p99 µs, CPU $(( (c1 - c0) / 1000 / (count > 0 ? count : 1) )) µs/request"
        local label=${proto/h1/HTTP\/1.1}
        label=${label/h2/HTTP\/2}
        row "CPU µs per GET at $rate/s, $label" "$f" "$(python3 -c "print(round(($c1 - $c0) / 1000 / max(1, $ok), 1))")"
        row "p50 ms at $rate/s, $label" "$f" "$(python3 -c "print($p50 / 1000)")"
        row "p99 ms at $rate/s, $label" "$f" "$(python3 -c "print($p99 / 1000)")"
        [[ "$ok" == "$count" && "$count" -gt 0 ]] || notes+=("$f $proto: $ok of $count requests answered 200 at $rate/s")
    done
    pin_rest
}
if [[ "$rows" == *" load "* ]]; then
    log "CPU and latency at $rate requests/s, $secs s per protocol (h2load on CPU 0, the front on CPU 1)"
    for f in "${running[@]}"; do measure_load "$f"; done
    notes+=("load: h2load, 4 connections, one request at a time each, $rate requests/s in all for $secs s, bearer token (a static token file at kube-apiserver and apiagg; TokenReview, cached, at kube-aggregator); CPU = the front's threads' run time (schedstat) / requests answered, the idle Go servers' background included")
fi

# ------------------------------------------------------------------------ RSS per idle watch
measure_watches() { # FRONT
    local f=$1 p=${pid[$1]} proto n before after ok per
    for proto in h2 h1; do
        n=$n_h2
        if [[ $proto == h1 ]]; then
            # A fresh process: what the HTTP/2 watches left (freed memory kept, or a Go heap
            # shrinking after them) must not count for or against the HTTP/1.1 ones.
            n=$n_h1
            restart_front "$f"
            p=${pid[$f]}
            sleep 3
        fi
        read -r before after ok <<<"$(python3 "$helper" watches --url "${url[$f]}" --pid "$p" --n "$n" \
            --proto "$proto" --ca serving-ca.crt --cert bench.crt --key bench.key --conns 50 --hold 5 2>>"$tmp/watches.log" || echo "0 0 0")"
        per=$(python3 -c "print(round(($after - $before) / max(1, $ok), 1))")
        log "  $f $proto: $ok of $n watches open, RSS $before -> $after KiB: $per KiB per watch"
        if [[ $proto == h2 ]]; then
            row "RSS KiB per idle watch, HTTP/2 stream" "$f" "$per"
        else
            row "RSS KiB per idle watch, HTTP/1.1 connection" "$f" "$per"
        fi
        [[ "$ok" == "$n" ]] || notes+=("$f $proto watches: only $ok of $n opened")
        sleep 3
    done
}
if [[ "$rows" == *" watch "* ]]; then
    log "RSS per idle watch: $n_h2 HTTP/2 streams over 50 connections, $n_h1 HTTP/1.1 connections"
    for f in "${running[@]}"; do measure_watches "$f"; done
    notes+=("watches: $n_h2 as HTTP/2 streams over 50 TLS connections, $n_h1 as TLS HTTP/1.1 connections, client certificate; RSS of the front before and 5 s after all heads arrived")
fi

# ------------------------------------------------------------- /apis and /openapi/v3 per second
measure_rps() { # FRONT
    local f=$1 p=${pid[$1]} path label rps
    pin_rest
    taskset -a -p -c 1 "$p" >/dev/null
    for path in /apis /openapi/v3/apis/wardle.example.com/v1alpha1; do
        label="answers/s, $path"
        [[ $path == /apis ]] && label="answers/s, aggregated /apis"
        [[ $path == /openapi* ]] && label="answers/s, /openapi/v3 of wardle"
        local hdr=(-H "Authorization: Bearer $token")
        [[ $path == /apis ]] && hdr+=(-H 'Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json')
        taskset -c 0 h2load -c 4 -m 10 -D 5 "${hdr[@]}" "${url[$f]}$path" >"$tmp/rps.$f" 2>&1 || true
        rps="$(awk '/^finished in/ {gsub(",", "", $4); print $4}' "$tmp/rps.$f")"
        ok="$(awk '/^status codes:/ {print $3}' "$tmp/rps.$f")"
        log "  $f $path: ${rps:-?} req/s (2xx: ${ok:-?})"
        [[ "${ok:-0}" -gt 0 ]] || { rps=""; notes+=("$f $path: no 2xx answers ($(grep -m1 -E 'status codes' "$tmp/rps.$f"))"); }
        row "$label" "$f" "${rps:-}" higher
    done
    pin_rest
}
if [[ "$rows" == *" rps "* ]]; then
    log "/apis and /openapi/v3 answers per second (h2load on CPU 0, 40 streams; the front on CPU 1)"
    for f in "${running[@]}"; do [[ $f == nginx ]] || measure_rps "$f"; done
fi

# --------------------------------------------------------------------------- backend outage
if [[ "$rows" == *" outage "* ]]; then
    log "sample-apiserver killed: time to Available=False and 503 at each aggregator, then back"
    args=()
    for f in "${running[@]}"; do [[ $f == nginx ]] || args+=(--front "$f=${url[$f]}"); done
    python3 "$helper" outage --name "$name" "${args[@]}" --ca serving-ca.crt --cert admin.crt --key admin.key \
        --object "$object" --kill-pid "${pid[sample]}" --restart sample.cmd >"$tmp/outage.json"
    sp="$(python3 -c "import json; print(json.load(open('$tmp/outage.json'))['_restarted_pid'])")"
    pids+=("$sp")
    pid[sample]=$sp
    for f in "${running[@]}"; do
        [[ $f == nginx ]] && continue
        for k in down_available down_answer up_available up_answer; do
            v="$(python3 -c "import json; v=json.load(open('$tmp/outage.json'))['$f'].get('${k}_s'); print('' if v is None else v)")"
            case $k in
                down_available) label="s from backend death to Available=False" ;;
                down_answer) label="s from backend death to 503" ;;
                up_available) label="s from backend return to Available=True" ;;
                up_answer) label="s from backend return to 200" ;;
            esac
            row "$label" "$f" "$v"
        done
    done
    cat "$tmp/outage.json" >&2
fi
