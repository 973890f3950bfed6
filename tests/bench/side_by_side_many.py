#!/usr/bin/env python3
"""Helpers for the `many` rows of side-by-side.sh (side_by_side_many.sh): OpenAPI v2 merge with
50 and 200 APIServices, cold start with 200 (Python 3 standard library only).

Subcommands:
  serve FIXTURES DIR N CERT KEY   N fake extension API servers in this one process, one group
                                  and one TLS port each (CERT/KEY; HTTP/1.1): group i is a copy
                                  of oauth-apiserver's oauth.openshift.io (i even) or
                                  user.openshift.io (i odd) named b<i//2>.<that group>
                                  (bench_helper.py's fake groups); /openapi/v2 holds its own
                                  paths and the definitions they reach, the openshift ones
                                  renamed io.bench.<b000-oauth>.… so that every group brings
                                  definitions of its own; GET of its resources answers an empty
                                  list. Writes DIR/many.json (group, service, port, the renamed
                                  definitions) once every port is bound
  kube-services URL CA CERT KEY DIR
                                  namespace `many` and one ExternalName Service (localhost, the
                                  backend's port) per group at kube-apiserver
  apiagg-services DIR             the `services:` entries of apiagg's config, one per group
  merge --url U --pid P --n N --dir DIR --ca --cert --key
                                  registers the first N groups' APIServices (POST, 8 connections)
                                  and polls /openapi/v2 until it holds every renamed definition of
                                  the N groups; prints JSON (see merge())
  coldstart --url U --pid P --t0 T --path PATH --ca --cert --key
                                  polls /readyz?verbose and GET PATH (each on a new connection,
                                  every 20 ms) until both answered 200; prints JSON (see
                                  coldstart())
"""

import argparse
import base64
import http.client
import json
import os
import re
import ssl
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_helper as bh  # noqa: E402  (fake groups and documents of startup.sh)

NS = "many"
REF = re.compile(r'"#/definitions/([^"]+)"')
DEF_KEY = re.compile(rb'"(io\.bench\.[A-Za-z0-9.\-]+)"\s*:')


def service_name(group):
    # b007.oauth.openshift.io -> b007-oauth (a DNS-1035 label)
    return "-".join(group.split(".")[:2])


def reachable(swagger, paths):
    """Definition names reached from `paths` and the shared parameters (transitively)."""
    defs = swagger["definitions"]
    todo = set(REF.findall(json.dumps([swagger["paths"][p] for p in paths] + [swagger.get("parameters", {})])))
    seen = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        todo |= set(REF.findall(json.dumps(defs[name])))
    return seen


def group_openapi(swagger, name, base):
    """/openapi/v2 of one fake group: its paths, the definitions they reach, renamed."""
    tag = service_name(name)
    own = [p for p in swagger["paths"] if p.startswith(f"/apis/{base}/")]
    kept = own + [p for p in ("/apis/", "/version/") if p in swagger["paths"]]
    doc = {k: v for k, v in swagger.items() if k not in ("paths", "definitions")}
    doc["paths"] = {p.replace(f"/apis/{base}/", f"/apis/{name}/", 1): swagger["paths"][p] for p in kept}
    doc["definitions"] = {d: swagger["definitions"][d] for d in sorted(reachable(swagger, kept))}
    text = bh.dumps(doc).decode()
    text = text.replace("com.github.openshift.api.", f"io.bench.{tag}.")
    text = text.replace(f'"group":"{base}"', f'"group":"{name}"')
    body = text.encode()
    v1_paths = [p for p in own if p.startswith(f"/apis/{base}/v1/")]
    expected = sorted(d.replace("com.github.openshift.api.", f"io.bench.{tag}.")
                      for d in reachable(swagger, v1_paths) if d.startswith("com.github.openshift.api."))
    return body, expected


class TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, handler, ctx):
        self.ctx = ctx
        super().__init__(("127.0.0.1", 0), handler)

    def get_request(self):
        sock, addr = self.socket.accept()
        # The handshake runs in the request's thread (first read), not in the accept loop.
        return self.ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request, client_address):
        pass


def serve(fixtures, d, n, cert, key):
    groups, legacy = bh.fake_groups(fixtures, n)
    with open(os.path.join(fixtures, "extension-apiservers/oauth-apiserver/openapi-v2/swagger.json")) as f:
        swagger = json.load(f)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["http/1.1"])
    servers, meta = [], []
    for name, base, item in groups:
        docs = bh.build_server_docs([(name, base, item)], legacy, swagger, openapi=False)
        body, expected = group_openapi(swagger, name, base)
        docs["/openapi/v2"] = ("application/json", body, bh.etag(body))
        for r in legacy[base]["resources"]:
            if "/" in r["name"]:
                continue
            lst = bh.dumps({"kind": r["kind"] + "List", "apiVersion": f"{name}/v1",
                            "metadata": {"resourceVersion": "1"}, "items": []})
            docs[f"/apis/{name}/v1/{r['name']}"] = ("application/json", lst, bh.etag(lst))
        srv = TLSServer(bh.make_handler(docs), ctx)
        servers.append(srv)
        meta.append({"group": name, "service": service_name(name), "port": srv.server_address[1],
                     "resource": legacy[base]["resources"][0]["name"], "expected": expected,
                     "openapi_bytes": len(body)})
    for srv in servers:
        threading.Thread(target=srv.serve_forever, args=(0.5,), daemon=True).start()
    tmp = os.path.join(d, "many.json.tmp")
    with open(tmp, "w") as f:
        json.dump(meta, f)
    os.rename(tmp, os.path.join(d, "many.json"))
    while True:
        time.sleep(3600)


def load(d):
    with open(os.path.join(d, "many.json")) as f:
        return json.load(f)


def client_ctx(ca, cert, key):
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    return ctx


def host_port(url):
    hp = url.split("://", 1)[1].rstrip("/")
    host, port = hp.rsplit(":", 1)
    return host, int(port)


def request(conn, method, path, body=None, accept="application/json"):
    headers = {"Accept": accept}
    if body is not None:
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    return r.status, r.read()


def kube_services(url, ca, cert, key, d):
    host, port = host_port(url)
    conn = http.client.HTTPSConnection(host, port, context=client_ctx(ca, cert, key), timeout=30)
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    code, out = request(conn, "POST", "/api/v1/namespaces", json.dumps(ns))
    if code not in (201, 409):
        sys.exit(f"namespace {NS}: {code} {out[:300]!r}")
    for g in load(d):
        svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": g["service"], "namespace": NS},
               "spec": {"type": "ExternalName", "externalName": "localhost",
                        "ports": [{"port": g["port"], "targetPort": g["port"]}]}}
        code, out = request(conn, "POST", f"/api/v1/namespaces/{NS}/services", json.dumps(svc))
        if code not in (201, 409):
            sys.exit(f"Service {g['service']}: {code} {out[:300]!r}")


def apiagg_services(d):
    for g in load(d):
        print(f"  - {{namespace: {NS}, name: {g['service']}, port: {g['port']}, "
              f"endpoints: [\"https://127.0.0.1:{g['port']}\"]}}")


def apiservice_body(g, bundle):
    return json.dumps({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": f"v1.{g['group']}", "labels": {"bench": NS}},
        "spec": {"group": g["group"], "version": "v1", "groupPriorityMinimum": 1000, "versionPriority": 15,
                 "service": {"namespace": NS, "name": g["service"], "port": g["port"]}, "caBundle": bundle},
    }, separators=(",", ":"))


def status_kib(pid):
    """(VmRSS, VmHWM) of `pid`, in KiB."""
    hwm, rss = bh.vmhwm(pid)
    return rss, hwm


def merge(a):
    """Time and memory of registering N APIServices until /openapi/v2 holds them all.

    t0: just before the first POST; registered_s: the last POST answered 201; complete_s: the
    first /openapi/v2 answer (JSON, polled on one keep-alive connection, POLL s between two
    answers) whose definitions include every renamed definition of the N groups. VmHWM is reset
    (clear_refs 5) at t0, so peak_kib is the process's highest RSS from t0 to complete_s;
    rss0_kib is its RSS at t0, sampled_peak_kib the highest VmRSS read every 20 ms (a check)."""
    groups = load(a.dir)[: a.n]
    with open(a.ca, "rb") as f:
        bundle = base64.b64encode(f.read()).decode()
    bodies = [apiservice_body(g, bundle) for g in groups]
    expected = {d for g in groups for d in g["expected"]}
    host, port = host_port(a.url)
    ctx = client_ctx(a.ca, a.cert, a.key)
    poll = http.client.HTTPSConnection(host, port, context=ctx, timeout=120)
    code, base = request(poll, "GET", "/openapi/v2")
    if code != 200:
        sys.exit(f"/openapi/v2 before: {code}")
    already = expected & set(m.decode() for m in DEF_KEY.findall(base))
    if already:
        sys.exit(f"/openapi/v2 holds {len(already)} of the definitions before registering")
    local = threading.local()
    peak = {"rss": 0}
    done = threading.Event()

    def post(body):
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=60)
        for _ in range(100):
            code, out = request(local.conn, "POST", "/apis/apiregistration.k8s.io/v1/apiservices", body)
            if code == 201:
                return
            if code not in (429, 503):
                raise RuntimeError(f"POST APIService: {code} {out[:300]!r}")
            time.sleep(0.05)
        raise RuntimeError("POST APIService: still 429/503 after 100 tries")

    def sample():
        while not done.is_set():
            peak["rss"] = max(peak["rss"], status_kib(a.pid)[0])
            time.sleep(0.02)

    rss0, hwm_before = status_kib(a.pid)
    with open(f"/proc/{a.pid}/clear_refs", "w") as f:
        f.write("5")
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    with ThreadPoolExecutor(a.conns) as pool:
        list(pool.map(post, bodies))
    registered = time.monotonic() - t0
    polls, found, last = 0, 0, None
    while True:
        now = time.monotonic() - t0
        if now > a.timeout:
            sys.exit(f"/openapi/v2 incomplete after {a.timeout} s: {found} of {len(expected)} definitions")
        try:
            code, body = request(poll, "GET", "/openapi/v2")
        except (OSError, http.client.HTTPException):
            poll.close()
            code, body = 0, b""
        polls += 1
        if code == 200:
            got = expected & set(m.decode() for m in DEF_KEY.findall(body))
            found = len(got)
            print(f"  {time.monotonic() - t0:7.3f} s: {found} of {len(expected)} definitions, "
                  f"{len(body)} bytes", file=sys.stderr)
            if found == len(expected):
                last = len(body)
                break
        time.sleep(a.poll)
    complete = time.monotonic() - t0
    done.set()
    sampler.join()
    rss1, hwm = status_kib(a.pid)
    print(json.dumps({"n": a.n, "registered_s": round(registered, 3), "complete_s": round(complete, 3),
                      "polls": polls, "bytes": last, "definitions": len(expected), "rss0_kib": rss0,
                      "hwm_before_kib": hwm_before, "peak_kib": hwm, "rss_end_kib": rss1,
                      "sampled_peak_kib": peak["rss"]}))


def coldstart(a):
    """Seconds from the process's spawn (t0, a CLOCK_REALTIME timestamp taken by the caller just
    before it) to the first 200 of /readyz and of GET PATH, each polled every 20 ms on a new TLS
    connection in its own thread; the readyz checks seen failing (first and last time seen, s);
    VmRSS and VmHWM once both answered."""
    host, port = host_port(a.url)
    ctx = client_ctx(a.ca, a.cert, a.key)
    first, failing = {}, {}

    def watch(key, path):
        while time.time() - a.t0 < a.timeout:
            try:
                conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=5)
                code, body = request(conn, "GET", path + ("?verbose" if path == "/readyz" else ""))
                conn.close()
            except (OSError, http.client.HTTPException):
                code, body = 0, b""
            if code == 200:
                first[key] = time.time() - a.t0
                return
            if path == "/readyz" and code:
                # the checks still failing, and since when (s from t0)
                now = round(time.time() - a.t0, 2)
                for line in body.decode(errors="replace").splitlines():
                    if line.startswith("[-]"):
                        failing.setdefault(line.split()[0][3:], [now, now])[1] = now
            time.sleep(0.02)

    threads = [threading.Thread(target=watch, args=k) for k in (("readyz_s", "/readyz"), ("get_s", a.path))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = {k: round(v, 3) for k, v in first.items()}
    out["readyz_failing"] = failing
    try:
        out["rss_kib"], out["hwm_kib"] = status_kib(a.pid)
    except OSError:
        pass
    print(json.dumps(out))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "serve":
        return serve(*args[:2], int(args[2]), *args[3:5])
    if cmd == "kube-services":
        return kube_services(*args)
    if cmd == "apiagg-services":
        return apiagg_services(*args)
    p = argparse.ArgumentParser(prog=f"side_by_side_many.py {cmd}")
    p.add_argument("--url", required=True)
    p.add_argument("--pid", type=int, required=True)
    for k in ("ca", "cert", "key"):
        p.add_argument(f"--{k}", required=True)
    p.add_argument("--timeout", type=float, default=300)
    if cmd == "merge":
        p.add_argument("--n", type=int, required=True)
        p.add_argument("--dir", required=True)
        p.add_argument("--conns", type=int, default=8)
        p.add_argument("--poll", type=float, default=0.1)
        return merge(p.parse_args(args))
    if cmd == "coldstart":
        p.add_argument("--t0", type=float, required=True)
        p.add_argument("--path", required=True)
        return coldstart(p.parse_args(args))
    sys.exit(f"unknown subcommand {cmd}")


if __name__ == "__main__":
    main()
