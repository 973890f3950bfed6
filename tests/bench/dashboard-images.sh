#!/usr/bin/env bash
# Pictures of the Grafana dashboard's key panels from a real run, for docs/operations.md.
#
# Usage (from the repo root):   tests/bench/dashboard-images.sh
#
# The scenario of tests/tests/e2e/dashboards.rs on a release build, in three phases of
# $PHASE_SECONDS each: "healthy" (GETs to two APIServices, wardle.example.com/v1alpha1 and
# doomed.example.com/v1, as tok-alice, $BASE_RPS per second each, and a watch held open all
# along), "backend killed" (doomed's backend gets SIGKILL; the same load, its requests now 503),
# "flood" (8 clients as tok-eve, whose group flow control sends to a one-seat level that rejects,
# and 10 as tok-alice, beyond --max-requests-inflight-per-apiservice 6, send GETs of 200 ms back
# to back, pausing 0.25 s after a 429), then $TAIL_SECONDS of the base load alone. A real Prometheus (Debian's) scrapes apiagg every
# second and evaluates deploy/monitoring/apiagg-rules.yaml every second; then each panel's queries,
# read by title from deploy/monitoring/dashboards/apiagg.json (not copied here), are sent to
# /api/v1/query_range as Grafana sends them with every variable at "All" and drawn with
# matplotlib: docs/images/dashboard/*.png, with docs/images/dashboard/README.md saying how.
# Many panels read recording rules over [5m]: with short phases their curves ramp rather than
# settle, as an operator would see them.
#
# Environment: CARGO_TARGET_DIR (default: <repo>/target), PHASE_SECONDS (60), TAIL_SECONDS (15),
# BASE_RPS (20), RATE_INTERVAL ($__rate_interval, 1m), STEP (query_range step, 1s),
# OUT (docs/images/dashboard), SKIP_BUILD=1, KEEP_TMP=1.
# Needs: cargo, python3, prometheus and matplotlib (both installed when missing).

set -euo pipefail

log() { printf '[dashboard-images] %s\n' "$*" >&2; }
die() { printf '[dashboard-images] error: %s\n' "$*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
plh="$here/proxy_load_helper.py"
helper="$here/dashboard_images.py"
dashboard="$repo/deploy/monitoring/dashboards/apiagg.json"
rules="$repo/deploy/monitoring/apiagg-rules.yaml"

PHASE_SECONDS="${PHASE_SECONDS:-60}"
TAIL_SECONDS="${TAIL_SECONDS:-15}"
BASE_RPS="${BASE_RPS:-20}"
RATE_INTERVAL="${RATE_INTERVAL:-1m}"
STEP="${STEP:-1s}"
OUT="${OUT:-$repo/docs/images/dashboard}"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"

command -v python3 >/dev/null 2>&1 || die "'python3' not found"
"$repo/scripts/need.sh" prometheus || die "Prometheus is needed (Debian's prometheus package)"
"$repo/scripts/need.sh" python:matplotlib || die "matplotlib could not be installed (pip)"
python3 "$helper" check-panels "$dashboard"

# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$here/lib.sh"
build_release_bins
bench_temp dashboard-images
started=$SECONDS

cp "$target_dir/release/apiagg" "$target_dir/release/sample-apiserver" "$tmp/"

read -r wardle_port doomed_port apiagg_port prom_port <<<"$(python3 "$plh" free-ports 4)"

log "sample-apiserver wardle.example.com/v1alpha1 on 127.0.0.1:$wardle_port"
"$tmp/sample-apiserver" --listen "127.0.0.1:$wardle_port" --group wardle.example.com \
    --version v1alpha1 --resource flunders --kind Flunder --name wardle \
    >"$tmp/wardle.out" 2>"$tmp/wardle.log" &
pids+=("$!")
log "sample-apiserver doomed.example.com/v1 on 127.0.0.1:$doomed_port (killed in phase 2)"
"$tmp/sample-apiserver" --listen "127.0.0.1:$doomed_port" --group doomed.example.com \
    --version v1 --resource foos --kind Foo --name doomed >"$tmp/doomed.out" 2>"$tmp/doomed.log" &
doomed_pid=$!
pids+=("$doomed_pid")
disown "$doomed_pid" # killed on purpose: no "Killed" from this shell
python3 "$plh" wait-http "http://127.0.0.1:$wardle_port/healthz" 10
python3 "$plh" wait-http "http://127.0.0.1:$doomed_port/healthz" 10

# As tests/tests/e2e/dashboards.rs: two users, tok-eve in group `refused`, which flow control
# sends to `refuser`, a level of one seat that rejects beyond it. With anonymous requests off,
# Prometheus scrapes /metrics with a token of its own, in group system:monitoring.
printf '%s\n' 'tok-alice,alice,1,"developers"' 'tok-eve,eve,2,"refused"' \
    'tok-prometheus,prometheus,3,"system:monitoring"' >"$tmp/tokens.csv"
cat >"$tmp/flow.yaml" <<'EOF'
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: refuser}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 1
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {type: Reject}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: refused}
spec:
  priorityLevelConfiguration: {name: refuser}
  matchingPrecedence: 500
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: Group, group: {name: refused}}]
    resourceRules: [{verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['*'], clusterScope: true}]
    nonResourceRules: [{verbs: ['*'], nonResourceURLs: ['*']}]
---
EOF
printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n' >"$tmp/audit-policy.yaml"
cat >"$tmp/apiagg.yaml" <<EOF
authentication: {anonymous: false, tokenFile: $tmp/tokens.csv}
services:
  - {namespace: test, name: wardle, port: 443, endpoints: ["http://127.0.0.1:$wardle_port"]}
  - {namespace: test, name: doomed, port: 443, endpoints: ["http://127.0.0.1:$doomed_port"]}
apiServices:
EOF
for spec in "wardle.example.com v1alpha1 wardle" "doomed.example.com v1 doomed"; do
    read -r g v s <<<"$spec"
    cat >>"$tmp/apiagg.yaml" <<EOF
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: $v.$g}
    spec: {group: $g, version: $v, groupPriorityMinimum: 1000, versionPriority: 15, service: {namespace: test, name: $s, port: 443}}
EOF
done
"$tmp/apiagg" check --config "$tmp/apiagg.yaml" >"$tmp/check.log" 2>&1 \
    || die "apiagg check rejected the config: $(cat "$tmp/check.log")"

log "apiagg on 127.0.0.1:$apiagg_port"
"$tmp/apiagg" serve --config "$tmp/apiagg.yaml" --listen "127.0.0.1:$apiagg_port" \
    --max-requests-inflight 100 --max-mutating-requests-inflight 100 \
    --max-requests-inflight-per-apiservice 6 --flow-control-config-file "$tmp/flow.yaml" \
    --audit-policy-file "$tmp/audit-policy.yaml" --audit-log-path "$tmp/audit.log" \
    >"$tmp/apiagg.log" 2>&1 &
pids+=("$!")
python3 "$plh" wait-http "http://127.0.0.1:$apiagg_port/readyz" 30 \
    || die "apiagg did not become ready: $(tail -n 20 "$tmp/apiagg.log")"

log "Prometheus on 127.0.0.1:$prom_port (scrape and rule evaluation every 1 s)"
cat >"$tmp/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["$rules"]
scrape_configs:
  - job_name: apiagg
    authorization: {credentials: tok-prometheus}
    static_configs: [{targets: ["127.0.0.1:$apiagg_port"]}]
EOF
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/prometheus" \
    --web.listen-address="127.0.0.1:$prom_port" >"$tmp/prometheus.log" 2>&1 &
pids+=("$!")
prom="http://127.0.0.1:$prom_port"
python3 "$plh" wait-http "$prom/-/ready" 60 \
    || die "Prometheus did not start: $(tail -n 20 "$tmp/prometheus.log")"
python3 "$helper" wait-scraped "$prom" 60

total=$(( 3 * PHASE_SECONDS + TAIL_SECONDS ))
log "scenario: 3 phases of ${PHASE_SECONDS} s and a ${TAIL_SECONDS} s tail (${total} s)"
python3 "$helper" run "$apiagg_port" "$doomed_pid" "$PHASE_SECONDS" "$TAIL_SECONDS" "$BASE_RPS" \
    "$tmp/timeline.json" || die "the scenario failed (KEEP_TMP=1 keeps the logs)"
sleep 2 # the last scrape and rule evaluation

mkdir -p "$OUT"
log "rendering to $OUT"
python3 "$helper" render "$prom" "$dashboard" "$tmp/timeline.json" "$OUT" "$RATE_INTERVAL" \
    "$STEP" | tee "$tmp/findings.txt"
log "the run, for the record ($(nproc) CPUs):"
python3 "$helper" report "$prom" "$dashboard" "$tmp/timeline.json" "$RATE_INTERVAL" \
    | tee "$tmp/report.txt"

date="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["date"])' "$tmp/timeline.json")"
{
    printf '# Dashboard pictures\n\n'
    fmt -w 99 <<EOF
These PNGs show key panels of apiagg's Grafana dashboard
(\`deploy/monitoring/dashboards/apiagg.json\`), rendered by \`tests/bench/dashboard-images.sh\`
from a real run on $date, on a machine of $(nproc) cores: a release apiagg with two sample
backends, a real Prometheus scraping it every second and evaluating
\`deploy/monitoring/apiagg-rules.yaml\` every second, and each panel's queries read from the
dashboard and sent as Grafana sends them with every variable at "All". The scenario is the one
of \`tests/tests/e2e/dashboards.rs\`, in three phases of ${PHASE_SECONDS} s: "healthy" (${BASE_RPS}
GETs per second to each of two APIServices, and a watch held open all along), "backend killed"
(the backend of \`v1.doomed.example.com\` is killed; the same load), and "flood" (18 clients
sending slow requests back to back, which flow control and the backend's bound of 6 requests in
flight answer with 429), then ${TAIL_SECONDS} s of the base load alone. The panels that read
recording rules over \`[5m]\` ramp rather than settle within a phase, as they would for an
operator. To regenerate them, run \`tests/bench/dashboard-images.sh\` from the repository root
(\`SKIP_BUILD=1\` to use the release binaries in \`target/release\`, \`PHASE_SECONDS\` to change
the phases' length).
EOF
} >"$OUT/README.md"
log "done in $(( SECONDS - started )) s: $(cd "$OUT" && echo *.png)"
