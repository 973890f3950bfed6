//! The dashboard (`deploy/monitoring/dashboards/apiagg.json`) and the recording rules
//! (`deploy/monitoring/apiagg-rules.yaml`) on a real Prometheus scraping a real apiagg through
//! the scenarios operators meet: healthy traffic with a watch held open, a backend killed, and
//! floods that flow control and a backend's bound answer with 429. Every panel's query and every recorded series is
//! evaluated through Prometheus' HTTP API: each is valid, and each returns what its scenario
//! should produce (`generate.py --expectations` says what, per query).

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use apiagg_tests::flow::{level, schema, SMALL_SERVER};
use apiagg_tests::prometheus::Prometheus;
use apiagg_tests::*;
use serde_json::Value;

use super::monitoring_rules::{dashboard_queries, workspace, DASHBOARD, GENERATOR};

const WARDLE: &str = "/apis/wardle.example.com/v1alpha1";
const DOOMED: &str = "/apis/doomed.example.com/v1";

/// Alice sends the traffic, eve is refused by flow control, Prometheus reads `/metrics` (as a
/// member of `system:monitoring`).
const TOKENS: &str = "tok-alice,alice,1,\"developers\"\ntok-eve,eve,2,\"refused\"\n\
                      tok-prom,prometheus,3,\"system:monitoring\"\n";

/// The query of a panel as Grafana sends it with every variable at "All" and a 5 minute range.
fn as_grafana_sends(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__range", "5m")
        .replace("$job", "apiagg.*")
        .replace("$instance", ".*")
        .replace("$apiservice", ".*")
}

/// Panel title → refId → what its query must return (`series`, `positive` or `valid`).
fn expectations() -> BTreeMap<String, BTreeMap<String, String>> {
    let output = Command::new("python3")
        .arg(GENERATOR)
        .arg("--expectations")
        .current_dir(workspace())
        .output()
        .expect("python3");
    assert!(output.status.success(), "{output:?}");
    let all: BTreeMap<String, Vec<(String, String)>> =
        serde_json::from_slice(&output.stdout).expect("expectations");
    all.into_iter()
        .map(|(title, queries)| (title, queries.into_iter().collect()))
        .collect()
}

/// What is wrong with `result` for `expect`, if anything.
fn unmet(expect: &str, result: &Result<Vec<Value>, String>) -> Option<String> {
    let series = match result {
        Err(e) => return Some(format!("invalid: {e}")),
        Ok(series) => series,
    };
    let value = |s: &Value| {
        s["value"][1]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    match expect {
        "valid" => None,
        "series" if series.is_empty() => Some("no series".into()),
        "series" => None,
        "positive" if series.iter().any(|s| value(s) > 0.0) => None,
        "positive" => Some(format!("no series above zero: {series:?}")),
        other => Some(format!("unknown expectation {other:?}")),
    }
}

/// `n` GETs of `path` at once as `token`; their status codes.
async fn burst(gw: &Apiagg, path: &str, token: &str, n: usize) -> Vec<u16> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (url, token) = (gw.url(path), token.to_string());
            tokio::spawn(async move {
                client()
                    .get(url)
                    .bearer_auth(token)
                    .send()
                    .await
                    .map_or(0, |r| r.status().as_u16())
            })
        })
        .collect();
    let mut codes = Vec::new();
    for task in tasks {
        codes.push(task.await.unwrap_or(0));
    }
    codes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_panel_and_recorded_series_returns_what_its_scenario_produces() {
    // Over TLS with its caBundle: the certificate panel has a series (`backend-ca`).
    let wardle = sample(G, "wardle", true);
    let doomed_port = hold_port();
    let mut doomed = Some(backend("doomed.example.com", "doomed", doomed_port.port));
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).expect("tokens");
    // Group `refused` goes to a level of one seat that rejects beyond it.
    let flow = dir.path().join("flow.yaml");
    let objects = format!(
        "{}{}",
        level("refuser", "{type: Reject}"),
        schema("refused", "refused", "refuser")
    );
    std::fs::write(&flow, objects).expect("flow objects");
    let policy = dir.path().join("audit-policy.yaml");
    let metadata = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n";
    std::fs::write(&policy, metadata).expect("audit policy");
    let config =
        format!(
        "authentication: {{anonymous: false, tokenFile: {}}}\nservices:\n{}{}apiServices:\n{}{}",
        tokens.display(),
        service("wardle", &wardle.url),
        service(
            "doomed",
            &format!("http://127.0.0.1:{}", doomed_port.port)
        ),
        apiservice(G, V, "wardle", &format!(", caBundle: {}", wardle.ca_bundle())),
        apiservice_v1("doomed.example.com", "doomed"),
    );
    let paths = |p: &std::path::Path| p.display().to_string();
    let mut flags = SMALL_SERVER.to_vec();
    let (flow, policy, log) = (
        paths(&flow),
        paths(&policy),
        paths(&dir.path().join("audit.log")),
    );
    flags.extend([
        "--max-requests-inflight-per-apiservice",
        "6",
        "--flow-control-config-file",
        &flow,
        "--audit-policy-file",
        &policy,
        "--audit-log-path",
        &log,
    ]);
    let gw = Apiagg::start(&config, &flags);
    gw.wait_ready().await;
    let rules = workspace().join("deploy/monitoring/apiagg-rules.yaml");
    let prometheus = Prometheus::start(
        &[format!("127.0.0.1:{}", gw.port)],
        Some("tok-prom"),
        &[rules],
    );

    // Healthy: requests to both backends, and a watch held open until the end.
    let watch = client()
        .get(gw.url(&format!("{WARDLE}/flunders?watch=1")))
        .bearer_auth("tok-alice")
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), 200, "the watch");
    let both_served =
        r#"count(sum by (group) (rate(apiagg_proxy_requests_total{code="200"}[1m])) > 0)"#;
    wait_until(
        "Prometheus to see both backends serve",
        Duration::from_secs(60),
        || async {
            for path in [format!("{WARDLE}/flunders"), format!("{DOOMED}/foos")] {
                let codes = burst(&gw, &path, "tok-alice", 5).await;
                assert!(codes.iter().all(|c| *c == 200), "{path}: {codes:?}");
            }
            prometheus.value(both_served).await
        },
        |seen| *seen == Some(2.0),
    )
    .await;

    // A backend killed: its APIService becomes unavailable and its requests get 503.
    drop(doomed.take());
    let seen_down = r#"max(aggregator_unavailable_apiservice{name="v1.doomed.example.com"}) * sum(rate(apiserver_request_terminations_total{group="doomed.example.com"}[1m]))"#;
    let answered_503 = AtomicUsize::new(0);
    wait_until(
        "Prometheus to see the killed backend unavailable and its requests ended by apiagg",
        Duration::from_secs(60),
        || async {
            let codes = burst(&gw, &format!("{DOOMED}/foos"), "tok-alice", 5).await;
            let refused = codes.iter().filter(|c| **c == 503).count();
            answered_503.fetch_add(refused, Ordering::Relaxed);
            burst(&gw, &format!("{WARDLE}/flunders"), "tok-alice", 5).await;
            prometheus.value(seen_down).await
        },
        |seen| seen.is_some_and(|v| v > 0.0),
    )
    .await;
    // Every 503 the dead backend's callers got counts as its answer, whether the connection
    // was refused or the APIService was already unavailable (its error ratio and alert see it).
    let counted_503 = r#"sum(apiagg_proxy_requests_total{group="doomed.example.com", code="503"})"#;
    wait_until(
        "Prometheus to count every 503 of the dead backend in its series",
        Duration::from_secs(30),
        || prometheus.value(counted_503),
        |counted| *counted == Some(answered_503.load(Ordering::Relaxed) as f64),
    )
    .await;

    // A flood from a user of the one-seat rejecting level, and one beyond the backend's bound
    // of 6 requests in flight: 429s.
    let flow_429 = "sum(rate(apiserver_flowcontrol_rejected_requests_total[1m]))";
    let bound_429 = r#"sum(rate(apiagg_proxy_requests_total{code="429"}[1m]))"#;
    wait_until(
        "Prometheus to see flow control and the backend bound answer 429 (flow control, bound)",
        Duration::from_secs(60),
        || async {
            let codes = burst(&gw, &format!("{WARDLE}/slow?ms=200"), "tok-eve", 8).await;
            assert!(codes.iter().all(|c| [200, 429].contains(c)), "{codes:?}");
            let codes = burst(&gw, &format!("{WARDLE}/slow?ms=200"), "tok-alice", 10).await;
            assert!(codes.iter().all(|c| [200, 429].contains(c)), "{codes:?}");
            (
                prometheus.value(flow_429).await,
                prometheus.value(bound_429).await,
            )
        },
        |(flow, bound)| flow.is_some_and(|v| v > 0.0) && bound.is_some_and(|v| v > 0.0),
    )
    .await;

    // Every panel's queries and every recorded series, once Prometheus has evaluated them all
    // (the rules run every second; a rate needs two scrapes).
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace().join(DASHBOARD)).expect("dashboard"),
    )
    .expect("dashboard JSON");
    let expect = expectations();
    let mut queries: Vec<(String, String, String)> = dashboard_queries(&dashboard)
        .into_iter()
        .map(|(title, ref_id, expr)| {
            let wanted = expect
                .get(&title)
                .and_then(|e| e.get(&ref_id))
                .cloned()
                .unwrap_or_else(|| panic!("{title} {ref_id}: no expectation"));
            (
                format!("{title} ({ref_id})"),
                as_grafana_sends(&expr),
                wanted,
            )
        })
        .collect();
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(workspace().join("deploy/monitoring/apiagg-rules.yaml"))
            .expect("rules"),
    )
    .expect("rules YAML");
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let record = rule["record"].as_str().expect("record").to_string();
            // Above zero, but for the queue wait quantiles: nothing queued in these scenarios
            // (the flood is rejected, not queued), so they are 0, or NaN for idle levels.
            let wanted = if record.contains("request_wait_duration") {
                "series"
            } else {
                "positive"
            };
            queries.push((record.clone(), record, wanted.into()));
        }
    }
    assert!(queries.len() > 40, "only {} queries", queries.len());
    let failures = wait_until(
        "every query to return what its scenario produces",
        Duration::from_secs(30),
        || async {
            let mut failures = Vec::new();
            for (name, expr, wanted) in &queries {
                let result = prometheus.query(expr).await;
                if let Some(why) = unmet(wanted, &result) {
                    failures.push(format!("{name}: {wanted}: {why}\n    {expr}"));
                }
            }
            failures
        },
        Vec::is_empty,
    )
    .await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    drop(watch);
}
