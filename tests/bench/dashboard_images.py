#!/usr/bin/env python3
"""Helper of dashboard-images.sh: drives the scenario and renders the dashboard's panels.

Python 3 standard library, plus matplotlib for `render`.

Subcommands:
  check-panels DASHBOARD            fail unless every panel the images show is in DASHBOARD
  wait-scraped PROMETHEUS_URL [SECONDS]
                                    wait until Prometheus has scraped apiagg (job="apiagg" up)
  run APIAGG_PORT DOOMED_PID PHASE_SECONDS TAIL_SECONDS BASE_RPS TIMELINE.json
                                    the scenario: phase "healthy" (steady GETs to both
                                    APIServices as tok-alice, one watch held open all along),
                                    "backend killed" (DOOMED_PID gets SIGKILL, same load),
                                    "flood" (slow requests back to back from 8 clients as
                                    tok-eve, which flow control rejects, and 10 as tok-alice,
                                    beyond the backend's bound of 6), then TAIL_SECONDS of the
                                    base load alone; writes the
                                    phases' times and what the client got to TIMELINE.json
  render PROMETHEUS_URL DASHBOARD TIMELINE.json OUTDIR RATE_INTERVAL STEP
                                    one PNG per group of panels (IMAGES), each panel's queries
                                    read from DASHBOARD by title and sent as Grafana sends them
                                    with every variable at "All"; prints the queries that
                                    returned no series or only zeros
  report PROMETHEUS_URL DASHBOARD TIMELINE.json RATE_INTERVAL
                                    a few numbers of the run, from the client, Prometheus and
                                    what some panels showed
"""

import json
import math
import os
import re
import signal
import socket
import sys
import threading
import time
import http.client
import urllib.error
import urllib.parse
import urllib.request

WARDLE = "/apis/wardle.example.com/v1alpha1"
DOOMED = "/apis/doomed.example.com/v1"
DOOMED_NAME = "v1.doomed.example.com"

# The pictures: file, heading, panel titles (as in apiagg.json), one subplot each.
IMAGES = [
    ("traffic.png", "Traffic per APIService",
     ["Requests per APIService", "Answers by code class", "5xx ratio per APIService"]),
    ("availability.png", "Availability",
     ["APIService unavailable", "Backend endpoints in use", "Answered by apiagg for backends"]),
    ("flow-control.png", "Flow control",
     ["Dispatched per priority level", "Rejected (429)", "Seats in use and limit"]),
    ("latency.png", "Latency and backend bounds",
     ["Proxied latency per APIService", "Refused at a backend's bound (429)"]),
    ("connections.png", "Watches and connections",
     ["Open watches", "Client connections"]),
]

PHASE_COLORS = {"healthy": "#2ca02c", "backend killed": "#d62728", "flood": "#ff7f0e"}


def die(msg):
    sys.exit(f"dashboard_images: {msg}")


# ---------------------------------------------------------------- the dashboard


def all_panels(panels):
    for p in panels:
        yield p
        yield from all_panels(p.get("panels", []))


def load_panels(path):
    """Title → panel, for every panel of the dashboard (rows' nested panels too)."""
    with open(path) as f:
        dashboard = json.load(f)
    return {p.get("title"): p for p in all_panels(dashboard.get("panels", []))}


def wanted_panels(path):
    panels = load_panels(path)
    titles = [t for _, _, ts in IMAGES for t in ts]
    missing = [t for t in titles if t not in panels]
    if missing:
        die(f"{path} has no panel titled " + ", ".join(repr(t) for t in missing)
            + " (renamed? update IMAGES in tests/bench/dashboard_images.py)")
    empty = [t for t in titles if not panels[t].get("targets")]
    if empty:
        die(f"{path}: panel(s) without queries: {', '.join(empty)}")
    return panels


def as_grafana_sends(expr, rate_interval):
    """The query with Grafana's variables as it sends them with every variable at "All"."""
    values = {
        "__rate_interval": rate_interval,
        "__range": "5m",
        "job": "apiagg.*",
        "instance": ".*",
        "apiservice": ".*",
    }
    names = "|".join(re.escape(n) for n in sorted(values, key=len, reverse=True))

    def sub(m):
        return values[m.group(1) or m.group(2)]

    out = re.sub(r"\$(?:\{(" + names + r")\}|(" + names + r")(?![A-Za-z0-9_]))", sub, expr)
    left = re.findall(r"\$(?:\{[A-Za-z_]\w*\}|[A-Za-z_]\w*)", out)
    if left:
        die(f"unknown Grafana variable(s) {left} in {expr}")
    return out


def legend(fmt, metric):
    if not fmt or fmt == "__auto":
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
        return f"{metric.get('__name__', '')}{{{inner}}}"
    return re.sub(r"\{\{\s*([A-Za-z_]\w*)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt).strip()


# ---------------------------------------------------------------- Prometheus


def prom(url, path, **params):
    q = urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(f"{url}{path}?{q}", timeout=30) as r:
            body = json.load(r)
    except urllib.error.HTTPError as e:
        body = json.load(e)
    if body.get("status") != "success":
        raise RuntimeError(f"{body.get('errorType')}: {body.get('error')} ({params.get('query')})")
    return body["data"]["result"]


def instant(url, query, at):
    return prom(url, "/api/v1/query", query=query, time=f"{at:.3f}")


def wait_scraped(url, seconds=60):
    deadline = time.time() + float(seconds)
    last = None
    while time.time() < deadline:
        try:
            r = prom(url, "/api/v1/query", query='up{job="apiagg"} == 1')
            if r:
                return
            last = "no successful scrape yet"
        except (OSError, RuntimeError) as e:
            last = e
        time.sleep(0.5)
    try:
        with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=10) as r:
            targets = json.load(r)["data"]["activeTargets"]
        last = "; ".join(f"{t['scrapeUrl']}: {t.get('lastError') or t['health']}" for t in targets)
    except (OSError, ValueError, KeyError) as e:
        last = f"{last}; targets: {e}"
    die(f"Prometheus did not scrape apiagg within {seconds} s ({last})")


# ---------------------------------------------------------------- the scenario


class Client:
    """One keep-alive HTTP/1.1 connection to apiagg, reopened after an error."""

    def __init__(self, port, timeout=10):
        self.port, self.timeout, self.conn = port, timeout, None

    def get(self, path, token):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                self.conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
                r = self.conn.getresponse()
                r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.close()
                return r.status
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt:
                    return 0
        return 0

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class Tally:
    """What the client got: (phase, name) → code → count, and the first 503 of the doomed."""

    def __init__(self, phases):
        self.phases = phases
        self.lock = threading.Lock()
        self.counts = {}
        self.first_doomed_503 = None

    def phase(self, t):
        for p in self.phases:
            if p["start"] <= t < p["end"]:
                return p["name"]
        return "after"

    def add(self, name, code, t):
        key = f"{self.phase(t)}|{name}"
        with self.lock:
            codes = self.counts.setdefault(key, {})
            codes[str(code)] = codes.get(str(code), 0) + 1
            if name == "doomed" and code == 503 and self.first_doomed_503 is None:
                self.first_doomed_503 = t


def paced(port, path, token, name, rps, until, tally):
    """GETs of `path` at `rps` per second until `until` (no catching up when late)."""
    client, period = Client(port), 1.0 / rps
    nxt = time.time()
    while True:
        now = time.time()
        if now >= until:
            break
        if now < nxt:
            time.sleep(nxt - now)
        t = time.time()
        tally.add(name, client.get(path, token), t)
        nxt += period
        if time.time() - nxt > 1.0:  # far behind: skip ahead rather than burst
            nxt = time.time()
    client.close()


def flooder(port, path, token, name, pause, until, tally):
    """GETs of `path` back to back until `until`; after a 429, a pause of `pause` seconds first.
    N of them together keep N requests in flight or knocking."""
    client = Client(port)
    while time.time() < until:
        code = client.get(path, token)
        tally.add(name, code, time.time())
        if code != 200:
            time.sleep(pause)
    client.close()


def hold_watch(port, stop, state):
    """A watch held open until `stop`, on a plain socket (its events are read and dropped)."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError as e:
        state["error"] = str(e)
        return
    try:
        sock.sendall((f"GET {WARDLE}/flunders?watch=1 HTTP/1.1\r\nHost: apiagg\r\n"
                      "Authorization: Bearer tok-alice\r\n\r\n").encode())
        head = b""
        while b"\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                raise OSError("closed before the status line")
            head += chunk
        state["status"] = int(head.split(b" ", 2)[1])
        state["opened"] = time.time()
        sock.settimeout(0.5)
        while not stop.is_set():
            try:
                if not sock.recv(65536):
                    state["ended"] = time.time()
                    break
            except TimeoutError:
                continue
    except (OSError, ValueError, IndexError) as e:
        state["error"] = str(e)
        state["ended"] = time.time()
    finally:
        sock.close()


def sleep_until(t):
    d = t - time.time()
    if d > 0:
        time.sleep(d)


def run(port, doomed_pid, phase_seconds, tail_seconds, base_rps, out):
    port, doomed_pid = int(port), int(doomed_pid)
    p, tail, rps = float(phase_seconds), float(tail_seconds), float(base_rps)

    stop = threading.Event()
    watch = {}
    wt = threading.Thread(target=hold_watch, args=(port, stop, watch), daemon=True)
    wt.start()
    deadline = time.time() + 10
    while "status" not in watch and "error" not in watch and time.time() < deadline:
        time.sleep(0.05)
    if watch.get("status") != 200:
        die(f"the watch was not opened: {watch}")

    t0 = time.time() + 1
    phases = [
        {"name": "healthy", "start": t0, "end": t0 + p},
        {"name": "backend killed", "start": t0 + p, "end": t0 + 2 * p},
        {"name": "flood", "start": t0 + 2 * p, "end": t0 + 3 * p},
    ]
    end = t0 + 3 * p + tail
    tally = Tally(phases)
    threads = []

    def spawn(fn, *args):
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        threads.append(t)

    sleep_until(t0)
    print(f"healthy: {rps:g} GET/s to each APIService as tok-alice, a watch open", file=sys.stderr)
    spawn(paced, port, f"{WARDLE}/flunders", "tok-alice", "wardle", rps, end, tally)
    spawn(paced, port, f"{DOOMED}/foos", "tok-alice", "doomed", rps, end, tally)

    sleep_until(t0 + p)
    kill_at = time.time()
    os.kill(doomed_pid, signal.SIGKILL)
    print(f"backend killed: pid {doomed_pid} (doomed.example.com)", file=sys.stderr)

    sleep_until(t0 + 2 * p)
    eve, alice, pause = 8, 10, 0.25
    print(f"flood: {eve} clients as tok-eve (flow control) and {alice} as tok-alice (the "
          f"backend's bound of 6) GET slow?ms=200 back to back, {pause:g} s after a 429",
          file=sys.stderr)
    slow = f"{WARDLE}/slow?ms=200"
    for _ in range(eve):
        spawn(flooder, port, slow, "tok-eve", "eve slow", pause, t0 + 3 * p, tally)
    for _ in range(alice):
        spawn(flooder, port, slow, "tok-alice", "alice slow", pause, t0 + 3 * p, tally)

    sleep_until(t0 + 3 * p)
    print(f"flood over: the base load alone for {tail:g} s", file=sys.stderr)
    sleep_until(end)
    for t in threads:
        t.join(timeout=15)
    stop.set()
    wt.join(timeout=5)
    timeline = {
        "t0": t0,
        "end": end,
        "phase_seconds": p,
        "tail_seconds": tail,
        "base_rps": rps,
        "phases": phases,
        "killed": kill_at,
        "first_doomed_503": tally.first_doomed_503,
        "watch": watch,
        "client": tally.counts,
        "date": time.strftime("%Y-%m-%d", time.gmtime(t0)),
    }
    with open(out, "w") as f:
        json.dump(timeline, f, indent=1)


# ---------------------------------------------------------------- rendering

APISERVICE_COLORS = {}


def nonzero(series):
    return any(math.isfinite(float(v)) and float(v) != 0 for _, v in series["values"])


def apiservice_of(metric):
    return metric.get("apiservice") or metric.get("name")


def apiservice_color(name):
    palette = ["#1f77b4", "#9467bd", "#8c564b", "#17becf", "#7f7f7f", "#bcbd22"]
    if name not in APISERVICE_COLORS:
        APISERVICE_COLORS[name] = palette[len(APISERVICE_COLORS) % len(palette)]
    return APISERVICE_COLORS[name]


UNITS = {"reqps": "requests/s", "ops": "per second", "s": "seconds", "percentunit": "share"}


def render(url, dashboard, timeline_path, outdir, rate_interval, step):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import PercentFormatter

    panels = wanted_panels(dashboard)
    with open(timeline_path) as f:
        tl = json.load(f)
    t0, start, end = tl["t0"], tl["t0"] - 5, tl["end"]
    os.makedirs(outdir, exist_ok=True)
    findings = []

    for fname, heading, titles in IMAGES:
        fig, axes = plt.subplots(1, len(titles), figsize=(12, 4.6), dpi=90)
        for ax, title in zip(axes, titles):
            panel = panels[title]
            unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
            fetched = []  # (line style, legend format, series) per query
            for i, target in enumerate(panel["targets"]):
                expr = as_grafana_sends(target["expr"], rate_interval)
                ref = target.get("refId", "?")
                try:
                    series = prom(url, "/api/v1/query_range", query=expr, start=f"{start:.3f}",
                                  end=f"{end:.3f}", step=step)
                except (OSError, RuntimeError) as e:
                    findings.append(f"{title} ({ref}): query failed: {e}\n    {expr}")
                    continue
                if not series:
                    findings.append(f"{title} ({ref}): no series over the run\n    {expr}")
                    continue
                if not any(nonzero(s) for s in series):
                    findings.append(f"{title} ({ref}): {len(series)} series, all zero or NaN "
                                    f"over the run\n    {expr}")
                # A panel's queries told apart by line style.
                fetched.append((["-", "--", ":"][i % 3], target.get("legendFormat"), series))
            # Series at 0 all along are left out of busy panels (their count is said).
            busy = sum(len(series) for _, _, series in fetched) > 4
            drawn, hidden = 0, 0
            for style, fmt, series in fetched:
                # One color per APIService across the images where a query has one series per
                # APIService (else matplotlib's cycle).
                keys = [apiservice_of(s["metric"]) for s in series]
                by_apiservice = None not in keys and len(set(keys)) == len(keys)
                for s in sorted(series, key=lambda s: legend(fmt, s["metric"])):
                    if busy and not nonzero(s):
                        hidden += 1
                        continue
                    # Gaps where Prometheus has no sample (as Grafana draws them).
                    px, py = [], []
                    for ts, v in s["values"]:
                        x = float(ts) - t0
                        if px and x - px[-1] > 1.5 * float(step.rstrip("s")):
                            px.append(float("nan"))
                            py.append(float("nan"))
                        px.append(x)
                        py.append(float(v))
                    color = apiservice_color(apiservice_of(s["metric"])) if by_apiservice else None
                    ax.plot(px, py, linewidth=1.4, linestyle=style, color=color,
                            label=legend(fmt, s["metric"]))
                    drawn += 1
            for ph in tl["phases"]:
                ax.axvspan(ph["start"] - t0, ph["end"] - t0, color=PHASE_COLORS[ph["name"]],
                           alpha=0.10, linewidth=0)
                ax.axvline(ph["start"] - t0, color=PHASE_COLORS[ph["name"]], linewidth=0.8,
                           linestyle="--")
            ax.axvline(tl["phases"][-1]["end"] - t0, color="grey", linewidth=0.8, linestyle="--")
            ax.set_xlim(start - t0, end - t0)
            ax.set_ylim(bottom=0)
            if unit == "percentunit":
                ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("seconds since the scenario started", fontsize=8)
            if unit in UNITS:
                ax.set_ylabel(UNITS[unit], fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, linewidth=0.3, alpha=0.6)
            if drawn:
                handles, labels = ax.get_legend_handles_labels()
                if hidden:
                    handles.append(Patch(color="none"))
                    labels.append(f"({hidden} series at 0 throughout not drawn)")
                ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.2),
                          fontsize=6.5, ncol=2 if len(labels) > 5 else 1, frameon=False)
            else:
                ax.text(0.5, 0.5, "no series" if not hidden else f"{hidden} series, all 0",
                        transform=ax.transAxes, ha="center", va="center", color="grey")
        fig.suptitle(heading, x=0.01, ha="left", fontsize=11, fontweight="bold")
        fig.legend(handles=[Patch(color=PHASE_COLORS[ph["name"]], alpha=0.3, label=ph["name"])
                            for ph in tl["phases"]],
                   loc="upper right", bbox_to_anchor=(0.99, 0.995), ncol=3, fontsize=8,
                   frameon=False)
        fig.tight_layout(rect=(0, 0, 1, 0.95))
        path = os.path.join(outdir, fname)
        fig.savefig(path, dpi=90)
        plt.close(fig)
        print(f"wrote {path} ({os.path.getsize(path) // 1024} KiB)", file=sys.stderr)

    if findings:
        print("queries that showed nothing in this run:")
        for f in findings:
            print("  " + f)
    else:
        print("every query of the rendered panels returned data above zero")


# ---------------------------------------------------------------- report


def by(result, *labels):
    return {" ".join(s["metric"].get(l, "") for l in labels): float(s["value"][1]) for s in result}


def fmt_rates(d, secs):
    rows = [f"{k or '-'} {v / secs:.1f}/s" for k, v in sorted(d.items()) if v > 0]
    return ", ".join(rows) or "none"


def panel_at(url, panels, title, at, rate_interval):
    """What the panel showed at `at`: "legend value" of its series above zero."""
    rows = []
    for target in panels[title]["targets"]:
        expr = as_grafana_sends(target["expr"], rate_interval)
        for s in instant(url, expr, at):
            v = float(s["value"][1])
            if math.isfinite(v) and v > 0:
                rows.append(f"{legend(target.get('legendFormat'), s['metric'])} {v:.3g}")
    return "; ".join(rows) or "nothing above 0"


def report(url, dashboard, timeline_path, rate_interval):
    panels = wanted_panels(dashboard)
    with open(timeline_path) as f:
        tl = json.load(f)
    t0, p = tl["t0"], tl["phase_seconds"]
    win = f"{int(p)}s"
    client = tl["client"]

    def got(phase, name, code=None):
        codes = client.get(f"{phase}|{name}", {})
        return sum(n for c, n in codes.items() if code is None or c == str(code))

    print(f"phase length {p:g} s; {tl['base_rps']:g} GET/s per APIService asked")
    # Phase 1: requests per APIService.
    seen = by(instant(url, 'sum by (version, group) (increase(apiagg_proxy_requests_total'
                      f'{{job="apiagg"}}[{win}]))', t0 + p), "version", "group")
    print("healthy, requests/s per APIService: client sent wardle "
          f"{got('healthy', 'wardle') / p:.1f}/s, doomed {got('healthy', 'doomed') / p:.1f}/s; "
          f"apiagg counted {fmt_rates({k.replace(' ', '.'): v for k, v in seen.items()}, p)}")
    shown = panel_at(url, panels, "Requests per APIService", t0 + p, rate_interval)
    print(f"  the panel \"Requests per APIService\" (5 min rates) showed at the end of healthy: "
          f"{shown}")
    # The kill.
    killed = tl["killed"]
    samples = instant(url, f'aggregator_unavailable_apiservice{{job="apiagg", name="{DOOMED_NAME}"}}'
                      f'[{int(tl["end"] - t0) + 10}s]', tl["end"])
    first = None
    for s in samples:
        for ts, v in s["values"]:
            if float(ts) >= killed and float(v) == 1 and (first is None or float(ts) < first):
                first = float(ts)
    print(f"backend killed at t={killed - t0:.1f} s: "
          + (f"first 503 to the client {tl['first_doomed_503'] - killed:.2f} s after; "
             if tl.get("first_doomed_503") else "the client never got a 503; ")
          + (f"{DOOMED_NAME} first scraped unavailable {first - killed:.2f} s after"
             if first else f"{DOOMED_NAME} never scraped unavailable"))
    codes = client.get("backend killed|doomed", {})
    print(f"backend killed, the doomed APIService's answers to the client: {codes}")
    # Phase 3: 429s by source.
    end3 = t0 + 3 * p
    fc = by(instant(url, 'sum by (priority_level, flow_schema, reason) (increase('
                    f'apiserver_flowcontrol_rejected_requests_total{{job="apiagg"}}[{win}]))', end3),
            "priority_level", "flow_schema", "reason")
    bound = by(instant(url, 'sum by (version, group) (increase(apiagg_proxy_requests_total'
                       f'{{job="apiagg", code="429"}}[{win}]))', end3), "version", "group")
    print("flood, 429/s: client got "
          f"tok-eve {got('flood', 'eve slow', 429) / p:.1f}/s "
          f"(of {got('flood', 'eve slow') / p:.1f}/s sent), "
          f"tok-alice slow {got('flood', 'alice slow', 429) / p:.1f}/s "
          f"(of {got('flood', 'alice slow') / p:.1f}/s sent); "
          f"apiagg counted flow control (level schema reason) {fmt_rates(fc, p)}; "
          f"backend bound {fmt_rates({k.replace(' ', '.'): v for k, v in bound.items()}, p)}")
    kinds = by(instant(url, 'sum by (kind) (increase(apiagg_requests_total'
                       f'{{job="apiagg", code="429"}}[{win}]))', end3), "kind")
    print(f"  every 429 apiagg answered (apiagg_requests_total), by route kind: "
          f"{fmt_rates(kinds, p)}")
    for title in ("Rejected (429)", "Refused at a backend's bound (429)"):
        print(f"  the panel \"{title}\" showed at the end of the flood: "
              f"{panel_at(url, panels, title, end3, rate_interval)}")
    shown = panel_at(url, panels, "5xx ratio per APIService", end3, rate_interval)
    print(f"  the panel \"5xx ratio per APIService\" showed at the end of the flood: {shown}")
    w = tl.get("watch", {})
    print(f"the watch: {w.get('status')}, "
          + ("open to the end" if "ended" not in w else f"ended at t={w['ended'] - t0:.1f} s"))


def main():
    if len(sys.argv) < 2:
        die(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "check-panels":
        wanted_panels(*args)
    elif cmd == "wait-scraped":
        wait_scraped(*args)
    elif cmd == "run":
        run(*args)
    elif cmd == "render":
        render(*args)
    elif cmd == "report":
        report(*args)
    else:
        die(f"unknown subcommand {cmd!r}\n{__doc__}")


if __name__ == "__main__":
    main()
