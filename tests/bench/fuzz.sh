#!/usr/bin/env bash
# Fuzzing (issue 11, item 7): builds the cargo-fuzz targets in fuzz/ and runs each for a bounded
# time, then prints per target the executions, exec/s, the projected time to 10 million
# executions, and the findings (crash, timeout and out-of-memory files).
#
# Usage (from anywhere):   tests/bench/fuzz.sh [seconds-per-target]        (default 300)
#
# Targets (fuzz/fuzz_targets/):
#   config_file       gateway config loader (GatewayConfig::load, multi-document APIService
#                     files) and Registry::build
#   apiservice_write  APIService API writes: strategy::decode / prepare_* and apply_patch with the
#                     four patch kinds on a fixed stored APIService
#   discovery_docs    APIGroupDiscoveryList (v2, v2beta1), APIResourceList, APIGroupList,
#                     APIGroup, APIVersions through split/convert/merge/render
#   discovery_accept  Accept / Accept-Encoding parsing and discovery negotiation
#   openapi_v2        PreparedV2::local / remote, merge_order, merge_v2, render_v2 (protobuf, gzip)
#   openapi_v3        V3Source::from_index, V3Served, render_v3, build_v3_index
#   cluster_services  Services and EndpointSlices from the delegate: ClusterServices lists, watch
#                     events, resolve in every mode, parse_endpoint
#
# Seeds are built at run time from the fixtures (nothing is copied into the repo): APIService
# manifests, discovery documents, OpenAPI v2 documents cut into one document per group-version
# (paths plus the definitions and parameters they reach), OpenAPI v3 documents and indexes, and
# a few hand-written patches, Accept headers, Services and EndpointSlices. The corpus grows
# across runs in $FUZZ_WORK.
#
# Each fuzzer runs under `nice -n 19` as one libFuzzer process (no -jobs), stops at the first
# finding, and is bounded by -max_total_time. Minimize a finding with
#   cargo +nightly fuzz tmin -s <sanitizer> <target> <file>
# and reproduce it with  cargo +nightly fuzz run -s <sanitizer> <target> <file>
#
# Environment: TARGETS (space-separated subset, default all), FUZZ_SANITIZER (none: the code
# under test is safe Rust; `address` is slower but also checks unsafe-libyaml's C-style code),
# MAX_LEN (65536: the largest input, 8192 for Accept headers, and the size cap of seeds),
# FUZZ_WORK (<repo>/target/fuzz: seeds, corpus, artifacts, logs, tmp), APIAGG_FIXTURES
# (<repo>/../shared/fixtures), SKIP_BUILD=1, FUZZ_ARGS (extra libFuzzer flags).
# Needs: rustup with a nightly toolchain, cargo-fuzz (cargo install cargo-fuzz), python3.

set -euo pipefail

log() { printf '[fuzz] %s\n' "$*" >&2; }
die() { printf '[fuzz] error: %s\n' "$*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

SECONDS_PER_TARGET="${1:-300}"
[[ "$SECONDS_PER_TARGET" =~ ^[0-9]+$ && "$SECONDS_PER_TARGET" -gt 0 ]] || die "seconds-per-target must be a positive integer"
ALL_TARGETS="config_file apiservice_write discovery_docs discovery_accept openapi_v2 openapi_v3 cluster_services"
TARGETS="${TARGETS:-$ALL_TARGETS}"
SANITIZER="${FUZZ_SANITIZER:-none}"
MAX_LEN="${MAX_LEN:-65536}"
work="${FUZZ_WORK:-$repo/target/fuzz}"
fixtures="${APIAGG_FIXTURES:-$repo/../shared/fixtures}"
GOAL=10000000

command -v python3 >/dev/null 2>&1 || die "'python3' not found"
command -v cargo >/dev/null 2>&1 || die "'cargo' not found"
cargo +nightly --version >/dev/null 2>&1 || die "no nightly toolchain (rustup toolchain install nightly)"
cargo +nightly fuzz --version >/dev/null 2>&1 || die "cargo-fuzz not found (cargo install cargo-fuzz)"
[[ -f "$fixtures/kubernetes/discovery/aggregated_v2.json" ]] || die "fixtures not found in $fixtures (set APIAGG_FIXTURES)"
for t in $TARGETS; do
    [[ " $ALL_TARGETS " == *" $t "* ]] || die "unknown target $t (known: $ALL_TARGETS)"
done

mkdir -p "$work"
log "building seeds in $work/seeds from $fixtures"
rm -rf "$work/seeds"
python3 - "$fixtures" "$work/seeds" "$repo" "$MAX_LEN" <<'PY'
import json, os, re, sys, glob

fixtures, out, repo, max_len = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
counts = {}

def seed(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    if len(data) > max_len:
        return
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:120]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
    counts[target] = counts.get(target, 0) + 1

def read(path):
    with open(path, "rb") as f:
        return f.read()

def documents(text):
    """YAML documents split on `---` lines (good enough for seeds; no YAML module needed)."""
    return [d for d in re.split(r"(?m)^---[^\n]*\n", text) if d.strip()]

try:
    import yaml
except ImportError:
    yaml = None

# --- config_file: config text, NUL, APIService file text -------------------------------------
manifests = sorted(glob.glob(os.path.join(fixtures, "apiservices", "**", "*.yaml"), recursive=True))
main = ("listen: 127.0.0.1:8080\nservices:\n"
        "  - namespace: kube-system\n    name: metrics-server\n    port: 443\n"
        "    endpoints: [\"https://127.0.0.1:9443\", \"http://[::1]:8080\"]\n"
        "apiServiceFiles:\n  - apiservices/*.yaml\n")
apiservice_objects = []
for path in manifests:
    text = read(path)
    base = os.path.basename(path)
    seed("config_file", "files-" + base, main.encode() + b"\0" + text)
    if yaml is not None:
        try:
            objs = [o for o in yaml.safe_load_all(text) if isinstance(o, dict) and o.get("kind") == "APIService"]
        except yaml.YAMLError:
            objs = []
        apiservice_objects += objs
        if objs:
            inline = {"listen": "127.0.0.1:8080", "serviceResolution": "config",
                      "services": [{"namespace": o["spec"]["service"]["namespace"], "name": o["spec"]["service"]["name"],
                                    "port": o["spec"]["service"].get("port", 443), "endpoints": ["https://127.0.0.1:9443"]}
                                   for o in objs if (o.get("spec") or {}).get("service")][:1],
                      "apiServices": objs}
            seed("config_file", "inline-" + base, json.dumps(inline, default=str))
examples = os.path.join(repo, "deploy", "examples")
if os.path.isfile(os.path.join(examples, "apiagg.yaml")):
    for f in sorted(glob.glob(os.path.join(examples, "apiservices", "*.yaml"))):
        seed("config_file", "example-" + os.path.basename(f), read(os.path.join(examples, "apiagg.yaml")) + b"\0" + read(f))
for f in sorted(glob.glob(os.path.join(repo, "deploy", "base", "apiagg.yaml"))):
    seed("config_file", "deploy-base", read(f))
seed("config_file", "delegate-url",
     "delegate:\n  url: https://127.0.0.1:6443\n  insecureSkipTLSVerify: true\n  bearerTokenFile: token\n"
     "authentication:\n  anonymous: true\n  tokenReview: true\n")
seed("config_file", "delegate-kubeconfig",
     "delegate:\n  kubeconfig: apiservices/a.yaml\n\0"
     "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"
     "clusters:\n- name: k\n  cluster: {server: 'https://10.0.0.1:6443', certificate-authority-data: 'LS0t'}\n"
     "users:\n- name: u\n  user: {token: abc}\n")

# --- apiservice_write: op byte + body (see fuzz_targets/apiservice_write.rs) -------------------
CREATE, UPDATE, JSONP, MERGE, STRATEGIC, APPLY, APPLY_CREATE, OPTIONS = range(8)
STATUS, FORCE, STRICT, IGNORE = 0x80, 0x40, 0x20, 0x10
NAME = "v1beta1.metrics.k8s.io"
if not apiservice_objects:
    apiservice_objects = [{"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                           "metadata": {"name": NAME},
                           "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                                    "versionPriority": 100, "insecureSkipTLSVerify": True,
                                    "service": {"namespace": "kube-system", "name": "metrics-server", "port": 443}}}]
for i, obj in enumerate(apiservice_objects):
    body = json.dumps(obj, default=str).encode()
    seed("apiservice_write", f"create-{i}", bytes([CREATE]) + body)
    seed("apiservice_write", f"create-strict-{i}", bytes([CREATE | STRICT]) + body)
    renamed = json.loads(json.dumps(obj, default=str))
    renamed.setdefault("metadata", {})["name"] = NAME
    body = json.dumps(renamed).encode()
    seed("apiservice_write", f"update-{i}", bytes([UPDATE]) + body)
    seed("apiservice_write", f"merge-{i}", bytes([MERGE]) + body)
    seed("apiservice_write", f"apply-{i}", bytes([APPLY]) + body)
    seed("apiservice_write", f"apply-force-{i}", bytes([APPLY | FORCE]) + body)
    seed("apiservice_write", f"apply-create-{i}", bytes([APPLY_CREATE | IGNORE]) + body)
for path in manifests:
    for j, doc in enumerate(documents(read(path).decode("utf-8", "replace"))):
        if "kind: APIService" in doc and NAME in doc:
            seed("apiservice_write", f"apply-yaml-{os.path.basename(path)}-{j}", bytes([APPLY]) + doc.encode())
            seed("apiservice_write", f"apply-create-yaml-{os.path.basename(path)}-{j}", bytes([APPLY_CREATE]) + doc.encode())
managed = [{"manager": "kubectl", "operation": "Apply", "apiVersion": "apiregistration.k8s.io/v1",
            "time": "2025-01-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:k8s-app": {}}},
                         "f:spec": {"f:group": {}, "f:service": {".": {}, "f:name": {}, "f:namespace": {}}}}},
           {"manager": "apiagg-availability", "operation": "Update", "subresource": "status",
            "apiVersion": "apiregistration.k8s.io/v1", "time": "2025-01-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:conditions": {".": {}, 'k:{"type":"Available"}': {".": {}, "f:status": {}, "f:reason": {}}}}}}]
with_managed = dict(apiservice_objects[0], metadata={"name": NAME, "managedFields": managed})
seed("apiservice_write", "update-managed-fields", bytes([UPDATE]) + json.dumps(with_managed).encode())
seed("apiservice_write", "apply-managed-fields", bytes([APPLY]) + json.dumps(with_managed).encode())
seed("apiservice_write", "create-clear-managed-fields", bytes([CREATE]) + json.dumps(dict(apiservice_objects[0], metadata={"name": NAME, "managedFields": [{}]})).encode())
patches = {
    "json-replace": (JSONP, '[{"op":"replace","path":"/spec/versionPriority","value":200},{"op":"test","path":"/spec/group","value":"metrics.k8s.io"}]'),
    "json-add-remove": (JSONP, '[{"op":"add","path":"/metadata/labels/a","value":"b"},{"op":"remove","path":"/spec/service"},{"op":"copy","from":"/spec/group","path":"/metadata/annotations"},{"op":"move","from":"/metadata/labels","path":"/metadata/x"}]'),
    "merge-null": (MERGE, '{"spec":{"service":null,"insecureSkipTLSVerify":null,"caBundle":"LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"}}'),
    "merge-finalizers": (MERGE | STRICT, '{"metadata":{"finalizers":["a/b"],"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"u1"}]},"spec":{"bogus":1}}'),
    "strategic-conditions": (STRATEGIC | STATUS, '{"status":{"conditions":[{"type":"Available","status":"True","reason":"Passed","message":"all checks passed","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Other","$patch":"delete"}]}}'),
    "strategic-replace": (STRATEGIC, '{"spec":{"$patch":"replace","group":"metrics.k8s.io","version":"v1beta1","groupPriorityMinimum":100,"versionPriority":100},"$setElementOrder/conditions":[{"type":"Available"}],"$retainKeys":["spec"]}'),
    "status-update": (UPDATE | STATUS, '{"metadata":{"name":"v1beta1.metrics.k8s.io"},"status":{"conditions":[{"type":"Available","status":"Unknown"}]}}'),
    "apply-yaml": (APPLY, "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: v1beta1.metrics.k8s.io\nspec:\n  versionPriority: 50\n  service: {namespace: kube-system, name: metrics-server, port: 8443}\n"),
    "apply-status": (APPLY | STATUS | FORCE, "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1beta1.metrics.k8s.io}\nstatus:\n  conditions:\n  - {type: Available, status: 'True', reason: Passed}\n"),
    "options": (OPTIONS, "fuzz\0true\0Strict\0kubectl/v1.32.0 (linux/amd64) kubernetes/abcdef\0application/apply-patch+yaml; charset=utf-8"),
    "options-bad": (OPTIONS, "\0false\0Bogus\0\0application/json-patch+json"),
}
for name, (op, body) in patches.items():
    seed("apiservice_write", name, bytes([op]) + body.encode())

# --- discovery_docs: every discovery document -------------------------------------------------
for path in sorted(glob.glob(os.path.join(fixtures, "**", "discovery", "*.json"), recursive=True)):
    if os.path.basename(path) != "v3-discovery.json":
        seed("discovery_docs", os.path.relpath(path, fixtures), read(path))
try:
    agg = json.loads(read(os.path.join(fixtures, "kubernetes", "discovery", "aggregated_v2.json")))
    # One group per seed (small inputs run faster), and v2beta1 with a stale version.
    for g in agg.get("items", [])[:12]:
        one = dict(agg, items=[g])
        seed("discovery_docs", "aggregated-" + g.get("metadata", {}).get("name", "core"), json.dumps(one))
    beta = dict(agg, apiVersion="apidiscovery.k8s.io/v2beta1", items=agg.get("items", [])[:2])
    if beta["items"] and beta["items"][0].get("versions"):
        beta["items"][0]["versions"][0]["freshness"] = "Stale"
    seed("discovery_docs", "aggregated-v2beta1", json.dumps(beta))
except (OSError, ValueError):
    pass

# --- discovery_accept: Accept headers ---------------------------------------------------------
for i, h in enumerate([
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer",
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList;q=0.9, application/json;q=0.5",
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf, application/json;q=0",
    "application/vnd.kubernetes.protobuf,application/json;as=Table;v=v1;g=meta.k8s.io,*/*;q=0.1",
    "text/html, application/xhtml+xml, */*;q=0.8",
    "application/json;stream=watch",
    "gzip, deflate, br;q=1.0, *;q=0.5",
    "*", "",
]):
    seed("discovery_accept", f"accept-{i}", h)

# --- openapi_v2: documents cut per group-version ----------------------------------------------
REF = re.compile(r'"\$ref":\s*"#/(definitions|parameters)/([^"]+)"')

def closure(doc, paths):
    defs, params = doc.get("definitions") or {}, doc.get("parameters") or {}
    keep = {"definitions": set(), "parameters": set()}
    todo = [json.dumps(paths)]
    while todo:
        for kind, name in REF.findall(todo.pop()):
            name = name.replace("~1", "/").replace("~0", "~")
            table = defs if kind == "definitions" else params
            if name in table and name not in keep[kind]:
                keep[kind].add(name)
                todo.append(json.dumps(table[name]))
    return keep

def cut(doc, prefix, limit):
    paths = {p: v for p, v in (doc.get("paths") or {}).items() if p.startswith(prefix)}
    while paths:
        keep = closure(doc, paths)
        small = {k: v for k, v in doc.items() if k not in ("paths", "definitions", "parameters")}
        small["paths"] = paths
        small["definitions"] = {k: v for k, v in (doc.get("definitions") or {}).items() if k in keep["definitions"]}
        if doc.get("parameters"):
            small["parameters"] = {k: v for k, v in doc["parameters"].items() if k in keep["parameters"]}
        data = json.dumps(small, separators=(",", ":"))
        if len(data) <= limit:
            return data
        paths = dict(list(paths.items())[: len(paths) // 2])
    return None

v2_files = (glob.glob(os.path.join(fixtures, "kubernetes", "openapi-v2", "*.json"))
            + glob.glob(os.path.join(fixtures, "kubernetes", "v2-v3-pairs", "v2_*.json"))
            + glob.glob(os.path.join(fixtures, "extension-apiservers", "**", "*.json"), recursive=True)
            + glob.glob(os.path.join(fixtures, "large", "crd-openapi-v2", "*.json"))
            + glob.glob(os.path.join(fixtures, "large", "config-connector-crds", "openapiv2", "*.json")))
for path in sorted(v2_files):
    try:
        doc = json.loads(read(path))
    except ValueError:
        continue
    if not isinstance(doc, dict) or doc.get("swagger") != "2.0":
        continue
    rel = os.path.relpath(path, fixtures)
    seed("openapi_v2", rel, read(path))  # whole document when small enough
    prefixes = []
    for p in doc.get("paths") or {}:
        m = re.match(r"^(/apis/[^/]+/[^/]+/|/api/v1/)", p)
        if m and m.group(1) not in prefixes:
            prefixes.append(m.group(1))
    for prefix in prefixes[:12]:
        data = cut(doc, prefix, min(max_len, 32768))
        if data:
            seed("openapi_v2", rel + prefix, data)
seed("openapi_v2", "definitions-only", json.dumps({"swagger": "2.0", "info": {"title": "x", "version": "v"}, "paths": None,
     "definitions": {"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "string"}}}))

# --- openapi_v3: indexes and documents --------------------------------------------------------
v3_files = (glob.glob(os.path.join(fixtures, "**", "openapi-v3", "*.json"), recursive=True)
            + glob.glob(os.path.join(fixtures, "large", "config-connector-crds", "openapiv3", "*.json"))
            + glob.glob(os.path.join(fixtures, "**", "v3-discovery.json"), recursive=True))
keys = []
for path in sorted(v3_files):
    seed("openapi_v3", os.path.relpath(path, fixtures), read(path))
    name = os.path.basename(path)
    if name.endswith("_openapi.json"):
        keys.append(name[: -len("_openapi.json")].replace("__", "/"))
seed("openapi_v3", "index-from-fixtures", json.dumps({"paths": {k: {"serverRelativeURL": f"/openapi/v3/{k}?hash={i:0128X}"} for i, k in enumerate(keys)}}))
seed("openapi_v3", "index-bad-entry", '{"paths":{"apis/x.io/v1":{"serverRelativeURL":7},"api/v1":{}}}')
seed("openapi_v3", "small-document", '{"openapi":"3.0.0","info":{"title":"Kubernetes","version":"v1.32.0"},"paths":{},"components":{"schemas":{}}}')

# --- cluster_services: Services and EndpointSlices as the delegate lists them ------------------
svc = lambda ns, name, spec: {"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": ns, "name": name}, "spec": spec}
ports = [{"name": "https", "port": 443, "targetPort": 6443, "protocol": "TCP"}]
services = [
    svc("kube-system", "metrics-server", {"type": "ClusterIP", "clusterIP": "10.96.0.10", "ports": ports}),
    svc("wardle", "api", {"clusterIP": "fd00::10", "ports": [{"port": 443}]}),
    svc("monitoring", "headless", {"clusterIP": "None", "ports": ports}),
    svc("karmada-system", "karmada-aggregated-apiserver", {"type": "ExternalName", "externalName": "karmada-aggregated-apiserver.karmada-system.svc.cluster.local"}),
]
def eps(ns, name, service, kind, endpoints, ports=({"name": "https", "port": 6443, "protocol": "TCP"},)):
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": kind, "endpoints": endpoints,
            "ports": list(ports), "metadata": {"namespace": ns, "name": name, "labels": {"kubernetes.io/service-name": service}}}
slices = [
    eps("kube-system", "metrics-server-abc12", "metrics-server", "IPv4",
        [{"addresses": ["10.244.0.5"], "conditions": {"ready": True}}, {"addresses": ["10.244.1.7"], "conditions": {"ready": False}}]),
    eps("wardle", "api-x1", "api", "IPv6", [{"addresses": ["fd00::1:5"]}], [{"port": 443}]),
    eps("monitoring", "headless-f", "headless", "FQDN", [{"addresses": ["a.example.com"]}]),
]
seed("cluster_services", "services-list", json.dumps(services))
seed("cluster_services", "slices-list", json.dumps(slices))
seed("cluster_services", "mixed-list", json.dumps(services + slices))
for i, o in enumerate(services + slices):
    seed("cluster_services", f"event-{i}", json.dumps(o))
if yaml is not None:
    for path in manifests:
        try:
            objs = [o for o in yaml.safe_load_all(read(path)) if isinstance(o, dict) and o.get("kind") == "Service"]
        except yaml.YAMLError:
            continue
        if objs:
            seed("cluster_services", "fixture-" + os.path.basename(path), json.dumps(objs, default=str))

for t in sorted(counts):
    print(f"[fuzz] seeds {t}: {counts[t]}", file=sys.stderr)
PY

cd "$repo"
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
    log "building fuzz targets (nightly, sanitizer $SANITIZER)"
    nice -n 19 cargo +nightly fuzz build -s "$SANITIZER" >&2
fi

# config_file writes its inputs to a temporary folder per process: keep those under $work.
export TMPDIR="$work/tmp"
rm -rf "$TMPDIR" && mkdir -p "$TMPDIR"

results=()
for t in $TARGETS; do
    corpus="$work/corpus/$t"
    artifacts="$work/artifacts/$t"
    seeds="$work/seeds/$t"
    mkdir -p "$corpus" "$artifacts" "$seeds" "$work/logs"
    logfile="$work/logs/$t.log"
    len="$MAX_LEN"
    # Real Accept headers are short: 8 KiB keeps this target on realistic sizes.
    if [[ "$t" == discovery_accept && "$len" -gt 8192 ]]; then len=8192; fi
    before="$(find "$artifacts" -type f | sort)"
    log "running $t for ${SECONDS_PER_TARGET}s (log: $logfile)"
    rc=0
    # shellcheck disable=SC2086
    nice -n 19 cargo +nightly fuzz run -s "$SANITIZER" "$t" "$corpus" "$seeds" -- \
        -max_total_time="$SECONDS_PER_TARGET" -max_len="$len" \
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" \
        ${FUZZ_ARGS:-} >"$logfile" 2>&1 || rc=$?
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$logfile" | tail -1)"
    rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$logfile" | tail -1)"
    if [[ -z "$execs" ]]; then
        # A crash ends the run without final stats: take the last status line.
        last="$(grep -E '^#[0-9]+' "$logfile" | tail -1 || true)"
        execs="$(sed -E 's/^#([0-9]+).*/\1/' <<<"$last")"
        rate="$(sed -nE 's/.*exec\/s: ([0-9]+).*/\1/p' <<<"$last")"
    fi
    after="$(find "$artifacts" -type f | sort)"
    new="$(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after") | sed '/^$/d')"
    findings="$(printf '%s\n' "$new" | sed '/^$/d' | wc -l)"
    size="$(find "$corpus" -type f | wc -l)"
    results+=("$t|${execs:-0}|${rate:-0}|$size|$findings|$rc|$(printf '%s' "$new" | tr '\n' ' ')")
done

printf '\nFuzzing: %s s per target, sanitizer %s, max_len %s, one process each under nice -n 19\n\n' \
    "$SECONDS_PER_TARGET" "$SANITIZER" "$MAX_LEN"
printf '%-17s %12s %8s %10s %8s %9s  %s\n' target executions exec/s "to 10M" corpus findings files
status=0
for row in "${results[@]}"; do
    IFS='|' read -r t execs rate size findings rc files <<<"$row"
    if [[ "${rate:-0}" -gt 0 ]]; then
        secs=$(( (GOAL + rate - 1) / rate ))
        if (( secs >= 3600 )); then to="$((secs / 3600))h$(printf '%02d' $(((secs % 3600) / 60)))m"; else to="$((secs / 60))m$(printf '%02d' $((secs % 60)))s"; fi
    else
        to="-"
    fi
    printf '%-17s %12s %8s %10s %8s %9s  %s\n' "$t" "$execs" "$rate" "$to" "$size" "$findings" "${files:--}"
    if [[ "$findings" -gt 0 || "$rc" -ne 0 ]]; then status=1; fi
done
exit "$status"
