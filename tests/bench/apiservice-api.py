#!/usr/bin/env python3
"""APIService API benchmark (Python 3 standard library only; start it with apiservice-api.sh).

Against a running apiagg (release build) with a running backend nginx, it measures:
  1. create+delete through the API, one client on a keep-alive connection: writes per second
     and p50/p99 latency of each create and each delete (every write is a durable transaction);
  2. time from the create of an APIService to the first proxied 200 for its group (20 times);
  3. apiagg's RSS before and after storing 10,000 APIServices (local ones, which need no probe).
"""
import http.client
import json
import sys
import time

port, backend_url, pid = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
API = "/apis/apiregistration.k8s.io/v1/apiservices"
conn = http.client.HTTPConnection("127.0.0.1", port)


def call(method, path, body=None):
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn.request(method, path, json.dumps(body) if body is not None else None, headers)
    r = conn.getresponse()
    data = r.read()
    return r.status, data


def apiservice(name, group, version, remote):
    spec = {"group": group, "version": version, "groupPriorityMinimum": 100, "versionPriority": 10}
    if remote:
        spec["service"] = {"namespace": "bench", "name": "widgets", "port": 443}
    return {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": f"{version}.{group}"}, "spec": spec}


def rss_kib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


# 1. create + delete
N = 500
creates, deletes = [], []
started = time.perf_counter()
for i in range(N):
    obj = apiservice(None, f"w{i}.bench.io", "v1", False)
    t = time.perf_counter()
    code, body = call("POST", API, obj)
    creates.append(time.perf_counter() - t)
    assert code == 201, (code, body)
    t = time.perf_counter()
    code, body = call("DELETE", f"{API}/v1.w{i}.bench.io")
    deletes.append(time.perf_counter() - t)
    assert code == 200, (code, body)
elapsed = time.perf_counter() - started
print(f"create+delete: {2 * N / elapsed:.0f} writes/s; create p50 {pct(creates, 50) * 1e3:.2f} ms "
      f"p99 {pct(creates, 99) * 1e3:.2f} ms; delete p50 {pct(deletes, 50) * 1e3:.2f} ms p99 {pct(deletes, 99) * 1e3:.2f} ms")

# 2. create -> first proxied 200
probe = http.client.HTTPConnection("127.0.0.1", port)
times = []
for i in range(20):
    group = f"r{i}.bench.io"
    t = time.perf_counter()
    code, body = call("POST", API, apiservice(None, group, "v1", True))
    assert code == 201, (code, body)
    while True:
        probe.request("GET", f"/apis/{group}/v1/namespaces/default/widgets/widget-1")
        r = probe.getresponse()
        r.read()
        if r.status == 200:
            break
        if time.perf_counter() - t > 10:
            sys.exit(f"{group} never answered 200 (last {r.status})")
        time.sleep(0.001)
    times.append(time.perf_counter() - t)
    call("DELETE", f"{API}/v1.{group}")
print(f"create to first proxied 200: p50 {pct(times, 50) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms (goal <= 100 ms)")

# 3. memory with 10,000 stored APIServices
before = rss_kib()
t = time.perf_counter()
for i in range(10_000):
    code, body = call("POST", API, apiservice(None, f"m{i}.bench.io", "v1", False))
    assert code == 201, (code, body)
took = time.perf_counter() - t
time.sleep(3)
after = rss_kib()
print(f"10,000 APIServices stored in {took:.1f} s; RSS {before / 1024:.1f} MiB -> {after / 1024:.1f} MiB "
      f"({(after - before) / 10_000:.2f} KiB per APIService)")
