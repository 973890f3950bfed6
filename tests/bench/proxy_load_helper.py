#!/usr/bin/env python3
"""Helpers for proxy-load.sh (Python 3 standard library only).

Subcommands:
  free-ports N                      print N distinct free TCP ports on 127.0.0.1
  body FILE                         write a ~1 KiB JSON object (a Kubernetes-like resource)
  apiagg-config DIR PORT BACKEND N GROUP
                                    write DIR/apiagg.yaml + DIR/apiservices.yaml: N APIServices
                                    (N distinct groups, each with its own Service entry pointing
                                    at BACKEND); GROUP is the measured one, placed in the middle
  core-ticks CPU...                 "busy,total" jiffies of each CPU (from /proc/stat)
  system-busy SECONDS               percent of all CPUs busy over SECONDS (other load)
  cpu-ticks PID                     utime+stime (clock ticks) of PID and its direct children
  wait-http URL [SECONDS]           wait until URL answers 200
  check URL FILE                    GET URL, fail unless 200 and the body equals FILE
  report RESULTS.tsv                print the table and the ratios
"""

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    print(" ".join(map(str, ports)))


def body(path):
    obj = {
        "apiVersion": "bench.example.com/v1",
        "kind": "Widget",
        "metadata": {
            "name": "widget-1",
            "namespace": "default",
            "uid": "6f1f0c2e-8a4b-4c55-9d3e-0a1b2c3d4e5f",
            "resourceVersion": "12345",
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "labels": {"app": "bench", "tier": "backend"},
            "annotations": {},
        },
        "spec": {"replicas": 3, "pad": ""},
        "status": {"ready": True, "conditions": []},
    }
    text = json.dumps(obj, separators=(",", ":"))
    obj["spec"]["pad"] = "x" * (1024 - len(text))
    text = json.dumps(obj, separators=(",", ":"))
    with open(path, "w") as f:
        f.write(text)


def apiagg_config(d, port, backend, n, group):
    n = int(n)
    groups = [f"g{i:04d}.bench.example.com" for i in range(n)]
    if group not in groups:
        groups[n // 2] = group
    with open(os.path.join(d, "apiservices.yaml"), "w") as f:
        for i, g in enumerate(groups):
            f.write(
                "---\n"
                "apiVersion: apiregistration.k8s.io/v1\n"
                "kind: APIService\n"
                f"metadata:\n  name: v1.{g}\n"
                "spec:\n"
                f"  group: {g}\n"
                "  version: v1\n"
                "  groupPriorityMinimum: 1000\n"
                "  versionPriority: 15\n"
                "  insecureSkipTLSVerify: true\n"
                f"  service:\n    namespace: bench\n    name: svc-{i:04d}\n    port: 443\n"
            )
    with open(os.path.join(d, "apiagg.yaml"), "w") as f:
        f.write(f"listen: 127.0.0.1:{port}\nservices:\n")
        for i in range(n):
            f.write(
                f"  - namespace: bench\n    name: svc-{i:04d}\n    port: 443\n"
                f'    endpoints: ["http://{backend}"]\n'
            )
        f.write("apiServiceFiles:\n  - apiservices.yaml\n")


def cpu_ticks(pid):
    pid = str(pid)

    def ticks(p):
        with open(f"/proc/{p}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # fields[0] is state (field 3); utime/stime are fields 14/15; ppid is field 4.
        return int(fields[1]), int(fields[11]) + int(fields[12])

    total = ticks(pid)[1]
    for p in os.listdir("/proc"):
        if not p.isdigit() or p == pid:
            continue
        try:
            ppid, t = ticks(p)
        except (OSError, IndexError, ValueError):
            continue
        if str(ppid) == pid:
            total += t
    print(total)


def _core_ticks():
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu"):
                name, *vals = line.split()
                vals = [int(v) for v in vals[:8]]
                idle = vals[3] + vals[4]  # idle + iowait
                out[name] = (sum(vals) - idle, sum(vals))
    return out


def core_ticks(cpus):
    t = _core_ticks()
    print(" ".join(f"{t['cpu' + c][0]},{t['cpu' + c][1]}" for c in cpus))


def system_busy(seconds):
    a = _core_ticks()["cpu"]
    time.sleep(float(seconds))
    b = _core_ticks()["cpu"]
    print(f"{(b[0] - a[0]) * 100 / max(1, b[1] - a[1]):.0f}")


def wait_http(url, seconds=30):
    deadline = time.time() + float(seconds)
    last = None
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError) as e:
            last = e
        time.sleep(0.1)
    sys.exit(f"timed out waiting for {url} to answer 200 (last error: {last})")


def check(url, path):
    with open(path, "rb") as f:
        want = f.read()
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            got, code = r.read(), r.status
    except urllib.error.HTTPError as e:
        sys.exit(f"{url}: HTTP {e.code}: {e.read()[:300]!r}")
    if code != 200 or got != want:
        sys.exit(f"{url}: unexpected answer {code}, {len(got)} bytes: {got[:200]!r}")


def report(path):
    rows = {}
    order = []
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            rec = dict(zip(header, line.rstrip("\n").split("\t")))
            rows[rec["case"]] = rec
            order.append(rec["case"])

    def num(case, key):
        return float(rows[case][key]) if case in rows else None

    print()
    print(
        f"{'case':<24} {'RPS':>9} {'p50 ms':>8} {'p99 ms':>8} {'proxy CPU':>10} "
        f"{'proxy µs/req':>12} {'backend µs/req':>14} {'load core':>9} {'proxy core':>10}"
    )
    for case in order:
        r = rows[case]
        cpu = "-" if r["proxy_cpu_pct"] == "-" else f"{float(r['proxy_cpu_pct']):.0f}%"
        us = "-" if r["proxy_us_per_req"] == "-" else f"{float(r['proxy_us_per_req']):.1f}"
        print(
            f"{case:<24} {float(r['rps']):>9.0f} {float(r['p50_us']) / 1000:>8.2f} "
            f"{float(r['p99_us']) / 1000:>8.2f} {cpu:>10} {us:>12} "
            f"{float(r['backend_us_per_req']):>14.1f} {float(r['load_core_pct']):>8.0f}% "
            f"{float(r['proxy_core_pct']):>9.0f}%"
        )
    print(
        "  proxy CPU: the proxy's own CPU time over the measured window (100% = one core);\n"
        "  load core / proxy core: how busy the whole CPU was (wrk + backend; proxy + anything else).\n"
        "  A proxy below ~90% CPU was not the bottleneck of its case; proxy core well above proxy CPU\n"
        "  means other processes ran there and the RPS of that case is not trustworthy."
    )

    def ratio(label, a, b, goal, higher_better=True):
        if a is None or b is None or b == 0:
            return
        x = a / b
        ok = x >= goal if higher_better else x <= goal
        cmp = "≥" if higher_better else "≤"
        print(f"  {label:<44} {x:6.2f}   (goal {cmp} {goal:g}: {'met' if ok else 'MISSED'})")

    print()
    print("ratios:")
    ratio("RPS apiagg / nginx", num("apiagg-1", "rps"), num("nginx", "rps"), 1.2)
    ratio("p99 apiagg / nginx", num("apiagg-1", "p99_us"), num("nginx", "p99_us"), 1.0, False)
    many = next(
        (c for c in order if c.startswith("apiagg-") and c not in ("apiagg-1", "apiagg-1-nometrics")),
        None,
    )
    ratio(
        f"RPS apiagg {many[7:] if many else '?'} APIServices / 1 APIService",
        num(many, "rps"),
        num("apiagg-1", "rps"),
        0.95,
    )
    a, n = num("apiagg-1", "proxy_us_per_req"), num("nginx", "proxy_us_per_req")
    if a and n:
        print(f"  {'CPU µs/req apiagg / nginx':<44} {a / n:6.2f}   (lower is better; informative)")
    a1, am = num("apiagg-1", "proxy_us_per_req"), num(many, "proxy_us_per_req")
    if a1 and am:
        print(f"  {'CPU µs/req apiagg ' + many[7:] + ' / 1':<44} {am / a1:6.2f}   (informative)")
    # METRICS_COST=1: what per-request metrics cost (relative to the run without them).
    w_us, n_us = num("apiagg-1", "proxy_us_per_req"), num("apiagg-1-nometrics", "proxy_us_per_req")
    w_rps, n_rps = num("apiagg-1", "rps"), num("apiagg-1-nometrics", "rps")
    if w_us and n_us and w_rps and n_rps:
        cpu_cost = (w_us / n_us - 1) * 100
        rps_cost = (1 - w_rps / n_rps) * 100
        print(
            f"  {'metrics cost, CPU µs/req (with/without - 1)':<44} {cpu_cost:5.1f}%   "
            f"(goal ≤ 3%: {'met' if cpu_cost <= 3 else 'MISSED'}; {w_us:.1f} vs {n_us:.1f} µs)"
        )
        print(
            f"  {'metrics cost, RPS (1 - with/without)':<44} {rps_cost:5.1f}%   "
            f"(goal ≤ 3%: {'met' if rps_cost <= 3 else 'MISSED'}; {w_rps:.0f} vs {n_rps:.0f}; RPS ±15% noise)"
        )


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {
        "free-ports": lambda: free_ports(int(args[0])),
        "body": lambda: body(args[0]),
        "apiagg-config": lambda: apiagg_config(*args),
        "cpu-ticks": lambda: cpu_ticks(args[0]),
        "core-ticks": lambda: core_ticks(args),
        "system-busy": lambda: system_busy(args[0]),
        "wait-http": lambda: wait_http(*args),
        "check": lambda: check(*args),
        "report": lambda: report(args[0]),
    }[cmd]()


if __name__ == "__main__":
    main()
