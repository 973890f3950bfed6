#!/usr/bin/env python3
"""Helpers for side-by-side.sh (Python 3 standard library; `watches --proto h2` needs the `h2`
package, `report` needs matplotlib: side-by-side.sh installs both through scripts/need.sh).

Subcommands:
  free-ports N                         N distinct free TCP ports on 127.0.0.1
  apiservice GROUP VERSION PORT CA     one APIService (JSON, one line) served by Service
                                       wardle/api port PORT, caBundle from the file CA
  urls FILE URL N                      a curl config: URL N times, each written to /dev/null
  cg-total FILE                        the instructions of one callgrind dump (its summary line)
  cpu-ns PID                           CPU time of PID's live threads, ns (schedstat)
  rss-kib PID                          VmRSS of PID, KiB
  latency LOGFILE...                   "p50_us p99_us count ok" of h2load --log-file output
  watches --url U --pid P --n N --proto h1|h2 --ca CA --cert C --key K [--conns 50]
                                       opens N watches (h1: one TLS connection each; h2: N
                                       streams over --conns TLS connections), waits until each
                                       has its response head, prints "rss_before rss_after ok";
                                       keeps them open for --hold seconds (default 3)
  outage --name NAME --front LABEL=URL... --ca CA --cert C --key K --object PATH
         --kill-pid PID --restart CMDFILE
                                       kills the backend (PID), then polls every front every
                                       50 ms: time to Available=False and to the first 503 of
                                       PATH; starts the backend again (CMDFILE, a shell line) and
                                       measures the time to Available=True and to the first 200;
                                       prints JSON
  report RESULTS.json OUT.md OUT.png   the table (markdown, also printed) and the chart
"""

import argparse
import asyncio
import base64
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request


def free_ports(n):
    import socket

    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    print(" ".join(str(s.getsockname()[1]) for s in socks))
    for s in socks:
        s.close()


def apiservice(group, version, port, ca):
    with open(ca, "rb") as f:
        bundle = base64.b64encode(f.read()).decode()
    print(
        json.dumps(
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"{version}.{group}"},
                "spec": {
                    "group": group,
                    "version": version,
                    "groupPriorityMinimum": 2000,
                    "versionPriority": 200,
                    "service": {"namespace": "wardle", "name": "api", "port": int(port)},
                    "caBundle": bundle,
                },
            },
            separators=(",", ":"),
        )
    )


def urls(path, url, n):
    with open(path, "w") as f:
        for _ in range(int(n)):
            f.write(f'url = "{url}"\noutput = "/dev/null"\n')


def cg_total(path):
    total = None
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or (total is None and line.startswith("totals:")):
                total = int(line.split()[1])
    print(total or 0)


def cpu_ns(pid):
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    print(total)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def latency(files):
    lat, ok = [], 0
    for path in files:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                lat.append(int(parts[2]))
                ok += parts[1] == "200"
    lat.sort()
    if not lat:
        print("0 0 0 0")
        return
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
    print(q(0.50), q(0.99), len(lat), ok)


def tls_context(ca, cert, key, alpn):
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols([alpn])
    return ctx


WATCH = "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders?watch=true"


async def watches(a):
    from urllib.parse import urlparse

    u = urlparse(a.url)
    host, port = u.hostname, u.port
    before = rss_kib(a.pid)
    held, failed = [], 0
    if a.proto == "h1":
        ctx = tls_context(a.ca, a.cert, a.key, "http/1.1")

        async def one():
            r, w = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=ctx, server_hostname="localhost"), 60
            )
            w.write(
                f"GET {WATCH} HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n\r\n".encode()
            )
            await w.drain()
            head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 60)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head[:80])
            return (r, w)

        for i in range(0, a.n, 200):
            results = await asyncio.gather(
                *(one() for _ in range(min(200, a.n - i))), return_exceptions=True
            )
            for x in results:
                if isinstance(x, Exception):
                    failed += 1
                    if failed < 3:
                        print(f"watch failed: {x!r}", file=sys.stderr)
                else:
                    held.append(x)
    else:
        import h2.config
        import h2.connection
        import h2.events

        ctx = tls_context(a.ca, a.cert, a.key, "h2")
        per = -(-a.n // a.conns)

        async def conn(k):
            r, w = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=ctx, server_hostname="localhost"), 60
            )
            c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            c.initiate_connection()
            c.increment_flow_control_window(1 << 30)
            w.write(c.data_to_send())
            await w.drain()
            heads, bad = 0, 0
            want = min(per, a.n - k * per)
            opened = 0
            max_streams = None
            retry = 0
            while heads + bad < want:
                if max_streams is not None:
                    # One opening stream at a time per connection (50 in all): a burst of
                    # thousands trips API Priority and Fairness (429) at every aggregator.
                    while opened < want and opened - heads - bad < 1:
                        sid = c.get_next_available_stream_id()
                        c.send_headers(
                            sid,
                            [(":method", "GET"), (":path", WATCH), (":scheme", "https"),
                             (":authority", "localhost"), ("accept", "application/json")],
                            end_stream=True,
                        )
                        opened += 1
                    w.write(c.data_to_send())
                    await w.drain()
                data = await asyncio.wait_for(r.read(65536), 60)
                if not data:
                    raise RuntimeError("connection closed")
                for ev in c.receive_data(data):
                    if isinstance(ev, h2.events.RemoteSettingsChanged) and max_streams is None:
                        max_streams = c.remote_settings.max_concurrent_streams or 100
                    elif isinstance(ev, h2.events.ResponseReceived):
                        st = dict(ev.headers).get(b":status")
                        if st == b"200":
                            heads += 1
                        elif st == b"429" and retry < 20 * want:
                            retry += 1
                            opened -= 1
                            await asyncio.sleep(0.2)
                        else:
                            bad += 1
                    elif isinstance(ev, h2.events.StreamReset):
                        bad += 1
                    elif isinstance(ev, h2.events.DataReceived):
                        c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                w.write(c.data_to_send())
                await w.drain()
            return (r, w, c, heads, bad)

        results = await asyncio.gather(
            *(conn(k) for k in range(a.conns) if k * per < a.n), return_exceptions=True
        )
        for x in results:
            if isinstance(x, Exception):
                failed += per
                print(f"h2 connection failed: {x!r}", file=sys.stderr)
            else:
                held.append(x)
                failed += x[4]
    await asyncio.sleep(a.hold)
    after = rss_kib(a.pid)
    print(before, after, a.n - failed)
    for x in held:
        x[1].close()


def get(url, ctx, timeout=2):
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def available(url, ctx):
    code, body = get(url, ctx)
    if code != 200:
        return None
    for c in json.loads(body).get("status", {}).get("conditions", []):
        if c.get("type") == "Available":
            return c.get("status")
    return None


def outage(a):
    ctx = ssl.create_default_context(cafile=a.ca)
    ctx.load_cert_chain(a.cert, a.key)
    fronts = [f.split("=", 1) for f in a.front]
    status_path = f"/apis/apiregistration.k8s.io/v1/apiservices/{a.name}"
    out = {label: {} for label, _ in fronts}

    def watch_until(phase, cond_want, code_want, limit):
        t0 = time.monotonic()
        pending = {(l, k) for l, _ in fronts for k in ("available", "answer")}
        while pending and time.monotonic() - t0 < limit:
            for label, base in fronts:
                if (label, "available") in pending and available(base + status_path, ctx) == cond_want:
                    out[label][f"{phase}_available_s"] = round(time.monotonic() - t0, 3)
                    pending.discard((label, "available"))
                if (label, "answer") in pending and get(base + a.object, ctx)[0] == code_want:
                    out[label][f"{phase}_answer_s"] = round(time.monotonic() - t0, 3)
                    pending.discard((label, "answer"))
            time.sleep(0.05)
        for label, what in pending:
            out[label][f"{phase}_{what}_s"] = None

    os.kill(a.kill_pid, 9)
    watch_until("down", "False", 503, a.limit)
    with open(a.restart) as f:
        line = f.read()
    p = subprocess.Popen(["bash", "-c", "exec " + line], start_new_session=True)
    print(f"restarted backend pid {p.pid}", file=sys.stderr)
    watch_until("up", "True", 200, a.limit)
    out["_restarted_pid"] = p.pid
    print(json.dumps(out))


LABELS = {
    "apiagg": "apiagg",
    "kube": "kube-apiserver",
    "agg": "kube-aggregator",
    "nginx": "nginx (floor)",
}


def fmt(v, unit=""):
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if abs(v) >= 1000:
        return f"{v:,.0f}{unit}"
    if abs(v) >= 100:
        return f"{v:.0f}{unit}"
    return f"{v:.1f}{unit}" if abs(v) >= 10 else f"{v:.2f}{unit}"


def report(path, md, png):
    with open(path) as f:
        res = json.load(f)
    rows = res["rows"]
    fronts = ["apiagg", "kube", "agg", "nginx"]
    lines = [
        f"| row | {' | '.join(LABELS[x] for x in fronts)} | apiagg / kube-apiserver | better |",
        "|---|" + "---|" * (len(fronts) + 2),
    ]
    for r in rows:
        vals = r["values"]
        a, k = vals.get("apiagg"), vals.get("kube")
        ratio = f"{a / k:.2f}" if isinstance(a, (int, float)) and isinstance(k, (int, float)) and k else "—"
        cells = [fmt(vals.get(x)) for x in fronts]
        lines.append(f"| {r['name']} | {' | '.join(cells)} | {ratio} | {r.get('better', 'lower')} |")
    notes = res.get("notes", [])
    text = "\n".join(lines)
    if notes:
        text += "\n\n" + "\n".join(f"- {n}" for n in notes)
    with open(md, "w") as f:
        f.write(text + "\n")
    print(text)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charted = [
        r for r in rows
        if isinstance(r["values"].get("kube"), (int, float)) and r["values"].get("kube")
        and isinstance(r["values"].get("apiagg"), (int, float))
    ]
    if not charted:
        return
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(charted) + 1.8))
    colors = {"apiagg": "#2b7bba", "kube": "#d9822b", "agg": "#8e6bbf", "nginx": "#7f7f7f"}
    h = 0.2
    for i, r in enumerate(charted):
        k = r["values"]["kube"]
        for j, x in enumerate(fronts):
            v = r["values"].get(x)
            if not isinstance(v, (int, float)):
                continue
            rel = v / k
            ax.barh(i + (j - 1.5) * h, rel, height=h, color=colors[x],
                    label=LABELS[x] if i == 0 or not ax.get_legend_handles_labels()[1].count(LABELS[x]) else None)
            ax.text(rel, i + (j - 1.5) * h, f" {fmt(v)}", va="center", fontsize=6)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(range(len(charted)))
    ax.set_yticklabels([f"{r['name']} ({r.get('better', 'lower')} is better)" for r in charted], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("relative to kube-apiserver's aggregator (= 1, log scale); the figure at each bar's end")
    ax.set_title(res.get("title", "apiagg side by side"), fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    seen = {}
    for hd, lb in zip(handles, labels):
        seen.setdefault(lb, hd)
    ax.legend(seen.values(), seen.keys(), fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "watches":
        ap = argparse.ArgumentParser()
        for k in ("--url", "--proto", "--ca", "--cert", "--key"):
            ap.add_argument(k, required=True)
        ap.add_argument("--pid", type=int, required=True)
        ap.add_argument("--n", type=int, required=True)
        ap.add_argument("--conns", type=int, default=50)
        ap.add_argument("--hold", type=float, default=3)
        asyncio.run(watches(ap.parse_args(args)))
    elif cmd == "outage":
        ap = argparse.ArgumentParser()
        ap.add_argument("--front", action="append", required=True)
        for k in ("--name", "--ca", "--cert", "--key", "--object", "--restart"):
            ap.add_argument(k, required=True)
        ap.add_argument("--kill-pid", type=int, required=True)
        ap.add_argument("--limit", type=float, default=90)
        outage(ap.parse_args(args))
    else:
        {
            "free-ports": lambda: free_ports(int(args[0])),
            "apiservice": lambda: apiservice(*args),
            "urls": lambda: urls(*args),
            "cg-total": lambda: cg_total(args[0]),
            "cpu-ns": lambda: cpu_ns(args[0]),
            "rss-kib": lambda: print(rss_kib(args[0])),
            "latency": lambda: latency(args),
            "report": lambda: report(*args),
        }[cmd]()


if __name__ == "__main__":
    main()
