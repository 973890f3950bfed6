#!/usr/bin/env python3
"""apiagg's Grafana dashboard, generated: this file is its only source.

    python3 generate.py            writes apiagg.json beside this file
    python3 generate.py --check    exits 1 when apiagg.json differs from what this file makes
    python3 generate.py --expectations
                                   prints, per panel and query, the scenario whose series it
                                   must return (what tests/tests/e2e/dashboards.rs checks)

The panels read the recording rules of ../apiagg-rules.yaml where a query is shared with the
alerts or costly (rates per APIService, latency quantiles), and raw series elsewhere. Every
query selects `job=~"$job", instance=~"$instance"`; per-APIService queries also
`apiservice=~"$apiservice"` (the recorded series carry that label: `version.group`, the
APIService's name).

Each query names what must be true of it after the test's scenarios (healthy traffic, then a
backend killed, then floods that flow control and a backend's bound answer with 429):
    "series"   it returns at least one series;
    "positive" it returns a series with a value above zero;
    "valid"    it is a valid query (the scenarios do not produce its series: config reload
               failures, dropped audit events, ...).
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "apiagg.json"

SEL = 'job=~"$job", instance=~"$instance"'
SEL_AS = SEL + ', apiservice=~"$apiservice"'
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# Recorded series (../apiagg-rules.yaml).
REQUESTS = "instance_apiservice_code:apiagg_proxy_requests:rate5m"
BUCKETS = "instance_apiservice_le:apiagg_proxy_request_duration_seconds_bucket:rate5m"
QUANTILES = "instance_apiservice_quantile:apiagg_proxy_request_duration_seconds:histogram_quantile"
KINDS = "instance_kind_code:apiagg_requests:rate5m"
DISPATCHED = "instance_priority_level_flow_schema:apiserver_flowcontrol_dispatched_requests:rate5m"
REJECTED = (
    "instance_priority_level_flow_schema_reason:apiserver_flowcontrol_rejected_requests:rate5m"
)
WAIT = (
    "instance_priority_level_quantile:apiserver_flowcontrol_request_wait_duration_seconds"
    ":histogram_quantile"
)


def q(expr, legend, expect="series"):
    """One query of a panel."""
    return {"expr": expr, "legend": legend, "expect": expect}


def timeseries(title, description, queries, unit="short", stack=False):
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "queries": queries,
        "unit": unit,
        "stack": stack,
    }


def stat(title, description, query, unit="short", thresholds=None):
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "queries": [query],
        "unit": unit,
        "thresholds": thresholds,
    }


def table(title, description, queries, unit="short"):
    return {
        "type": "table",
        "title": title,
        "description": description,
        "queries": queries,
        "unit": unit,
    }


RED_ABOVE_ZERO = [("green", None), ("red", 1)]

ROWS = [
    (
        "Overview",
        [
            stat(
                "Instances up",
                "apiagg instances Prometheus scrapes successfully.",
                q(f"sum(up{{{SEL}}})", "up"),
            ),
            stat(
                "APIServices registered",
                "APIServices in the serving registry (config file, APIService API, delegate).",
                q(f"max(apiagg_registered_apiservices{{{SEL}}})", "registered"),
            ),
            stat(
                "APIServices unavailable",
                "APIServices whose requests are answered 503 (Available=False).",
                q(
                    f"count(max by (name) (aggregator_unavailable_apiservice{{{SEL}}}) == 1) "
                    "or vector(0)",
                    "unavailable",
                ),
                thresholds=RED_ABOVE_ZERO,
            ),
            stat(
                "Requests",
                "Every request apiagg answered, per second (5 min rate).",
                q(f"sum({KINDS}{{{SEL}}})", "requests"),
                unit="reqps",
            ),
            stat(
                "5xx answers",
                "Share of all answers that were 5xx (5 min rate).",
                q(
                    f'sum({KINDS}{{{SEL}, code=~"5.."}}) / sum({KINDS}{{{SEL}}}) or vector(0)',
                    "5xx",
                ),
                unit="percentunit",
                thresholds=[("green", None), ("orange", 0.01), ("red", 0.05)],
            ),
            stat(
                "Requests in flight",
                "Requests being served right now (watches included).",
                q(f"sum(apiagg_requests_in_flight{{{SEL}}})", "in flight"),
            ),
        ],
    ),
    (
        "Traffic per APIService",
        [
            timeseries(
                "Requests per APIService",
                "Requests proxied to each remote APIService, per second.",
                [q(f"sum by (apiservice) ({REQUESTS}{{{SEL_AS}}})", "{{apiservice}}")],
                unit="reqps",
            ),
            timeseries(
                "Answers by code class",
                "Proxied requests per APIService and class of status code (the backend's, "
                "or apiagg's own 429, 503 and 504 when it did not reach the backend).",
                [
                    q(
                        "sum by (apiservice, class) (label_replace("
                        f'{REQUESTS}{{{SEL_AS}}}, "class", "${{1}}xx", "code", "([0-9]).*"))',
                        "{{apiservice}} {{class}}",
                        "positive",
                    )
                ],
                unit="reqps",
                stack=True,
            ),
            timeseries(
                "5xx ratio per APIService",
                "Share of an APIService's proxied requests that ended in 5xx: the "
                "ApiaggBackendErrors alert fires above 5% for 10 min. The 503s apiagg answers "
                "for an unavailable APIService count here too.",
                [
                    q(
                        f'sum by (apiservice) ({REQUESTS}{{{SEL_AS}, code=~"5.."}}) / '
                        f"sum by (apiservice) ({REQUESTS}{{{SEL_AS}}})",
                        "{{apiservice}}",
                        "positive",
                    )
                ],
                unit="percentunit",
            ),
            timeseries(
                "Requests by route and code",
                "Every answer apiagg gave, by the route it took (proxy, delegate, own, "
                "upgrade, health, metrics, refused, notfound, shutdown) and status code.",
                [q(f"sum by (kind, code) ({KINDS}{{{SEL}}})", "{{kind}} {{code}}")],
                unit="reqps",
            ),
        ],
    ),
    (
        "Latency",
        [
            timeseries(
                "Proxied latency per APIService",
                "Quantiles over the requests that ended within 60 s (long-running requests "
                "left out, as the ApiaggBackendSlow alert counts them).",
                [
                    q(
                        f'{QUANTILES}{{{SEL_AS}, quantile="0.99"}}',
                        "p99 {{apiservice}} {{instance}}",
                    ),
                    q(
                        f'{QUANTILES}{{{SEL_AS}, quantile="0.9"}}',
                        "p90 {{apiservice}} {{instance}}",
                    ),
                    q(
                        f'{QUANTILES}{{{SEL_AS}, quantile="0.5"}}',
                        "p50 {{apiservice}} {{instance}}",
                    ),
                ],
                unit="s",
            ),
            timeseries(
                "Slower than 1 s per APIService",
                "Share of an APIService's requests (ended within 60 s) that took over 1 s: "
                "the ApiaggBackendSlow alert fires above 1% for 10 min.",
                [
                    q(
                        f'(sum by (apiservice) ({BUCKETS}{{{SEL_AS}, le=~"60|60.0"}}) - '
                        f'sum by (apiservice) ({BUCKETS}{{{SEL_AS}, le=~"1|1.0"}})) / '
                        f'sum by (apiservice) ({BUCKETS}{{{SEL_AS}, le=~"60|60.0"}})',
                        "{{apiservice}}",
                    )
                ],
                unit="percentunit",
            ),
            timeseries(
                "p99 by route",
                "99th percentile of every answer's duration, by route kind.",
                [
                    q(
                        "histogram_quantile(0.99, sum by (kind, le) (rate("
                        f"apiagg_request_duration_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                        "{{kind}}",
                    )
                ],
                unit="s",
            ),
        ],
    ),
    (
        "Availability",
        [
            timeseries(
                "APIService unavailable",
                "1 while an APIService is not available (its requests get 503).",
                [
                    q(
                        "max by (name) (aggregator_unavailable_apiservice"
                        f'{{{SEL}, name=~"$apiservice"}})',
                        "{{name}}",
                        "positive",
                    )
                ],
            ),
            table(
                "Became unavailable, by reason",
                "Times an APIService went from available to not available since each apiagg "
                "instance started, with the reason of its Available condition "
                "(ServiceNotFound, MissingEndpoints, FailedDiscoveryCheck, ServiceAccessError). "
                "A count, not a rate: a reason's series is born with its first transition, "
                "which a rate would not show.",
                [
                    q(
                        "sum by (name, reason) (aggregator_unavailable_apiservice_total"
                        f'{{{SEL}, name=~"$apiservice"}})',
                        "{{name}} {{reason}}",
                        "positive",
                    )
                ],
            ),
            timeseries(
                "Backend endpoints in use",
                "1 while requests go to the endpoint, 0 while apiagg has ejected it.",
                [
                    q(
                        "min by (apiservice, endpoint) (apiagg_backend_endpoint_healthy"
                        f"{{{SEL_AS}}})",
                        "{{apiservice}} {{endpoint}}",
                    )
                ],
            ),
            timeseries(
                "Answered by apiagg for backends",
                "Requests apiagg ended itself because the backend could not serve them: 503 "
                "(no connection, TLS failure), 504 (--request-timeout).",
                [
                    q(
                        "sum by (group, version, code) (rate(apiserver_request_terminations_total"
                        f"{{{SEL}}}[$__rate_interval]))",
                        "{{version}}.{{group}} {{code}}",
                        "positive",
                    )
                ],
                unit="reqps",
            ),
        ],
    ),
    (
        "Backend bounds",
        [
            timeseries(
                "Refused at a backend's bound (429)",
                "Requests answered 429 per APIService: apiagg's own when the APIService or one "
                "endpoint already has its bound of requests in flight "
                "(--max-requests-inflight-per-apiservice, "
                "--max-requests-inflight-per-endpoint), or the backend's.",
                [
                    q(
                        f'sum by (apiservice) ({REQUESTS}{{{SEL_AS}, code="429"}})',
                        "{{apiservice}}",
                        "positive",
                    )
                ],
                unit="reqps",
            ),
            timeseries(
                "Requests in flight per instance",
                "Requests being served by each apiagg instance (watches included), against "
                "which the per-APIService and per-endpoint bounds and --max-connections apply.",
                [
                    q(
                        f"sum by (instance) (apiagg_requests_in_flight{{{SEL}}})",
                        "{{instance}}",
                        "positive",
                    )
                ],
            ),
        ],
    ),
    (
        "Flow control",
        [
            timeseries(
                "Dispatched per priority level",
                "Requests API Priority and Fairness let run, per second.",
                [
                    q(
                        f"sum by (priority_level) ({DISPATCHED}{{{SEL}}})",
                        "{{priority_level}}",
                        "positive",
                    )
                ],
                unit="reqps",
            ),
            timeseries(
                "Rejected (429)",
                "Requests flow control answered 429, by flow schema, priority level and reason "
                "(queue-full, concurrency-limit, time-out): the ApiaggFlowControlRejecting "
                "alert fires above 0.1/s for 15 min.",
                [
                    q(
                        f"sum by (flow_schema, priority_level, reason) ({REJECTED}{{{SEL}}})",
                        "{{flow_schema}} {{priority_level}} {{reason}}",
                        "positive",
                    )
                ],
                unit="reqps",
            ),
            timeseries(
                "Waiting in queues",
                "Requests queued per priority level right now.",
                [
                    q(
                        "sum by (priority_level) (apiserver_flowcontrol_current_inqueue_requests"
                        f"{{{SEL}}})",
                        "{{priority_level}}",
                    )
                ],
            ),
            timeseries(
                "Seats in use and limit",
                "Seats of running requests against each priority level's current limit (a "
                "list takes one seat per ~100 KB it is expected to return).",
                [
                    q(
                        "sum by (priority_level) (apiserver_flowcontrol_current_executing_seats"
                        f"{{{SEL}}})",
                        "in use {{priority_level}}",
                    ),
                    q(
                        "sum by (priority_level) (apiserver_flowcontrol_current_limit_seats"
                        f"{{{SEL}}})",
                        "limit {{priority_level}}",
                        "positive",
                    ),
                ],
            ),
            timeseries(
                "Queue wait p99",
                "99th percentile of the time requests that ran waited in a queue.",
                # Series per level; NaN where nothing waited.
                [q(f"{WAIT}{{{SEL}}}", "{{priority_level}}")],
                unit="s",
            ),
        ],
    ),
    (
        "Watches and connections",
        [
            timeseries(
                "Open watches",
                "Watches open through apiagg (counted by flow control), by group and resource.",
                [
                    q(
                        f"sum by (group, resource) (apiagg_open_watches{{{SEL}}})",
                        "{{group}} {{resource}}",
                        "positive",
                    )
                ],
            ),
            timeseries(
                "Client connections",
                "Client connections being served, and those refused at --max-connections or "
                "closed for being too slow (per second).",
                [
                    q(f"sum(apiagg_client_connections{{{SEL}}})", "open", "positive"),
                    q(
                        "sum(rate(apiagg_client_connections_refused_total"
                        f"{{{SEL}}}[$__rate_interval]))",
                        "refused/s",
                    ),
                    q(
                        "sum by (phase) (rate(apiagg_client_connections_timed_out_total"
                        f"{{{SEL}}}[$__rate_interval]))",
                        "timed out/s {{phase}}",
                    ),
                ],
            ),
            timeseries(
                "Streaming lists",
                "Streaming lists (sendInitialEvents=true) per APIService, passed to a backend "
                "that serves them (native) or emulated by apiagg.",
                [
                    q(
                        "sum by (apiservice, mode) (rate(apiagg_watch_list_streams_total"
                        f"{{{SEL_AS}}}[$__rate_interval]))",
                        "{{apiservice}} {{mode}}",
                        "valid",
                    )
                ],
                unit="reqps",
            ),
        ],
    ),
    (
        "Authorization",
        [
            timeseries(
                "Decisions per authorizer",
                "Decisions of the authorizer chain (--authorization-config), by authorizer "
                "type and name and decision.",
                [
                    q(
                        "sum by (type, name, decision) (rate("
                        f"apiserver_authorization_decisions_total{{{SEL}}}[$__rate_interval]))",
                        "{{type}} {{name}} {{decision}}",
                        "valid",
                    )
                ],
                unit="ops",
            ),
            timeseries(
                "Webhook reviews",
                "SubjectAccessReviews sent to webhooks, by result, and decisions of "
                "authorization.mode: Webhook by cache hit or miss.",
                [
                    q(
                        "sum by (name, result) (rate("
                        "apiserver_authorization_webhook_evaluations_total"
                        f"{{{SEL}}}[$__rate_interval]))",
                        "{{name}} {{result}}",
                        "valid",
                    ),
                    q(
                        "sum by (decision, cache) (rate(apiagg_authorization_decisions_total"
                        f"{{{SEL}}}[$__rate_interval]))",
                        "{{decision}} ({{cache}})",
                        "valid",
                    ),
                ],
                unit="ops",
            ),
            timeseries(
                "Webhook latency p99",
                "99th percentile of the webhooks' review round trips.",
                [
                    q(
                        "histogram_quantile(0.99, sum by (name, le) (rate("
                        "apiserver_authorization_webhook_duration_seconds_bucket"
                        f"{{{SEL}}}[$__rate_interval])))",
                        "{{name}}",
                        "valid",
                    )
                ],
                unit="s",
            ),
        ],
    ),
    (
        "Audit and tracing",
        [
            timeseries(
                "Audit events",
                "Audit events generated, per second.",
                [
                    q(
                        f"sum(rate(apiserver_audit_event_total{{{SEL}}}[$__rate_interval]))",
                        "events",
                        "positive",
                    )
                ],
                unit="ops",
            ),
            timeseries(
                "Audit events lost",
                "Events dropped before their backend took them (by backend and reason), and "
                "events a backend failed to write (by plugin).",
                [
                    q(
                        "sum by (backend, reason) (rate(apiagg_audit_events_dropped_total"
                        f"{{{SEL}}}[$__rate_interval]))",
                        "dropped {{backend}} {{reason}}",
                        "valid",
                    ),
                    q(
                        "sum by (plugin) (rate(apiserver_audit_error_total"
                        f"{{{SEL}}}[$__rate_interval]))",
                        "failed {{plugin}}",
                    ),
                ],
                unit="ops",
            ),
            timeseries(
                "Trace spans",
                "Spans the OpenTelemetry collector took, and those dropped (queue full, export "
                "failed).",
                [
                    q(
                        "sum(rate(apiagg_tracing_spans_exported_total"
                        f"{{{SEL}}}[$__rate_interval]))",
                        "exported",
                        "valid",
                    ),
                    q(
                        "sum by (reason) (rate(apiagg_tracing_spans_dropped_total"
                        f"{{{SEL}}}[$__rate_interval]))",
                        "dropped {{reason}}",
                        "valid",
                    ),
                ],
                unit="ops",
            ),
        ],
    ),
    (
        "Configuration and certificates",
        [
            timeseries(
                "Config reloads",
                "Config reloads by result; a failure keeps the previous config serving "
                "(ApiaggConfigReloadFailing).",
                [
                    q(
                        "sum by (result) (increase(apiagg_config_reloads_total"
                        f"{{{SEL}}}[$__rate_interval]))",
                        "config {{result}}",
                        "valid",
                    ),
                    q(
                        "sum by (status) (increase("
                        "apiserver_authentication_config_controller_automatic_reloads_total"
                        f"{{{SEL}}}[$__rate_interval]))",
                        "authentication {{status}}",
                        "valid",
                    ),
                    q(
                        "sum by (status) (increase("
                        "apiserver_authorization_config_controller_automatic_reloads_total"
                        f"{{{SEL}}}[$__rate_interval]))",
                        "authorization {{status}}",
                        "valid",
                    ),
                ],
            ),
            stat(
                "Last config reload",
                "0 when the last config reload was rejected (the previous config serves).",
                q(f"min(apiagg_config_last_reload_successful{{{SEL}}})", "successful"),
                thresholds=[("red", None), ("green", 1)],
            ),
            table(
                "Certificates expire in",
                "Time until the earliest certificate of each kind expires (alerts at 14 and 2 "
                "days).",
                [
                    q(
                        "min by (certificate) (apiagg_certificate_expiration_timestamp_seconds"
                        f"{{{SEL}}}) - time()",
                        "{{certificate}}",
                    )
                ],
                unit="s",
            ),
        ],
    ),
]


def variables():
    def query_var(name, label, query, regex="", include_all=True, multi=True):
        return {
            "name": name,
            "label": label,
            "type": "query",
            "datasource": DATASOURCE,
            "query": {"query": query, "refId": f"{name}-var"},
            "definition": query,
            "refresh": 2,
            "regex": regex,
            "includeAll": include_all,
            "multi": multi,
            "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "sort": 1,
        }

    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {"selected": False, "text": "default", "value": "default"},
            "regex": "",
            "refresh": 1,
        },
        query_var(
            "job",
            "Job",
            "label_values(apiagg_requests_total, job)",
            regex="apiagg.*",
        ),
        query_var(
            "instance",
            "Instance",
            'label_values(apiagg_requests_total{job=~"$job"}, instance)',
        ),
        query_var(
            "apiservice",
            "APIService",
            'label_values(aggregator_unavailable_apiservice{job=~"$job", '
            'instance=~"$instance"}, name)',
        ),
    ]


def panel_json(panel, ident, grid):
    targets = []
    for i, query in enumerate(panel["queries"]):
        target = {
            "refId": chr(ord("A") + i),
            "datasource": DATASOURCE,
            "expr": query["expr"],
            "legendFormat": query["legend"],
            "range": panel["type"] != "table",
            "instant": panel["type"] == "table",
        }
        targets.append(target)
    defaults = {"unit": panel["unit"]}
    thresholds = panel.get("thresholds")
    if thresholds:
        defaults["thresholds"] = {
            "mode": "absolute",
            "steps": [{"color": c, "value": v} for c, v in thresholds],
        }
    if panel["type"] == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10,
            "showPoints": "never",
            "stacking": {"mode": "normal" if panel["stack"] else "none", "group": "A"},
        }
    out = {
        "id": ident,
        "type": panel["type"],
        "title": panel["title"],
        "description": panel["description"],
        "datasource": DATASOURCE,
        "gridPos": grid,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": []},
    }
    if panel["type"] == "timeseries":
        out["options"] = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif panel["type"] == "stat":
        out["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
        }
    else:
        out["options"] = {"showHeader": True}
        out["transformations"] = [{"id": "labelsToFields", "options": {}}]
    return out


def dashboard():
    panels = []
    ident = 1
    y = 0
    for title, members in ROWS:
        panels.append(
            {
                "id": ident,
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        ident += 1
        y += 1
        stats = all(p["type"] == "stat" for p in members)
        per_line = 6 if stats else 2 if len(members) % 2 == 0 else 3
        width = 24 // per_line
        height = 4 if stats else 8
        for i, panel in enumerate(members):
            grid = {
                "h": height,
                "w": width,
                "x": (i % per_line) * width,
                "y": y + (i // per_line) * height,
            }
            panels.append(panel_json(panel, ident, grid))
            ident += 1
        y += height * ((len(members) + per_line - 1) // per_line)
    return {
        "title": "apiagg",
        "uid": "apiagg-gateway",
        "description": "apiagg, the Kubernetes API aggregation gateway: traffic, latency and "
        "availability per APIService, flow control, watches, audit, configuration. "
        "Generated by deploy/monitoring/dashboards/generate.py.",
        "tags": ["apiagg", "kubernetes"],
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": variables()},
        "annotations": {"list": []},
        "links": [],
        "panels": panels,
    }


def expectations():
    """Panel title → [(refId, expect)], for the test."""
    out = {}
    for _, members in ROWS:
        for panel in members:
            out[panel["title"]] = [
                [chr(ord("A") + i), query["expect"]] for i, query in enumerate(panel["queries"])
            ]
    return out


def render():
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def main(args):
    if args == ["--check"]:
        if not OUTPUT.exists() or OUTPUT.read_text() != render():
            print(f"{OUTPUT} is not what generate.py makes: run python3 {__file__}")
            return 1
        return 0
    if args == ["--expectations"]:
        print(json.dumps(expectations(), indent=2))
        return 0
    if args:
        print(__doc__)
        return 2
    OUTPUT.write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
