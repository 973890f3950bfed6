//! apiagg's metrics as a real Prometheus (Debian's) scrapes and queries them.

use std::process::{Command, Stdio};
use std::time::Duration;

use apiagg_tests::*;
use serde_json::Value;

const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// The port a Prometheus started with `--web.listen-address=127.0.0.1:0` picked, from its
/// `msg="Listening on" address=…` log line (its log keeps being drained afterwards).
fn prometheus_port(prometheus: &mut std::process::Child) -> u16 {
    use std::io::BufRead;
    let stderr = prometheus.stderr.take().expect("prometheus stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let port = line
                .contains("msg=\"Listening on\"")
                .then(|| {
                    line.rsplit(':')
                        .next()
                        .and_then(|p| p.trim().parse::<u16>().ok())
                })
                .flatten();
            if let Some(port) = port {
                let _ = tx.send(port);
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("Prometheus did not say where it listens within 30 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_expected_series() {
    let backend_hold = hold_port();
    let backend_port = backend_hold.port;
    let mut b = Some(backend("prom.example.com", "prom", backend_port));
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("prom", &format!("http://127.0.0.1:{backend_port}")),
        apiservice_v1("prom.example.com", "prom"),
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    for _ in 0..25 {
        assert_eq!(
            status_code(&gw.url("/apis/prom.example.com/v1/foos")).await,
            200
        );
    }
    let _ = client()
        .get(gw.url("/apis"))
        .header("Accept", V2)
        .send()
        .await
        .expect("apis");

    // promtool lints the exposition.
    let text = get_text(&gw.url("/metrics")).await;
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus)");
    {
        use std::io::Write;
        promtool
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write");
    }
    let out = promtool.wait_with_output().expect("promtool");
    // kube-apiserver's own name, kept for its users' queries although promtool would have it
    // end in `_total`: the only lint problem allowed.
    let upstream = ["authentication_attempts counter metrics should have \"_total\" suffix"];
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let problems: Vec<&str> = report
        .lines()
        .filter(|l| !l.trim().is_empty() && !upstream.contains(&l.trim()))
        .collect();
    assert!(
        problems.is_empty(),
        "promtool (exit {:?}): {problems:?}",
        out.status.code()
    );

    // A real Prometheus scrapes apiagg.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nscrape_configs:\n  - job_name: apiagg\n    static_configs: [{{targets: [\"127.0.0.1:{}\"]}}]\n",
            gw.port
        ),
    )
    .expect("prometheus.yml");
    let mut prometheus = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.path().join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg("--web.listen-address=127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prometheus (apt-get install prometheus)");
    let prom_port = prometheus_port(&mut prometheus);
    let _prometheus = Proc { child: prometheus };
    let query = |q: &'static str| {
        let url = format!("http://127.0.0.1:{prom_port}/api/v1/query");
        async move {
            let r = client()
                .get(&url)
                .query(&[("query", q)])
                .send()
                .await
                .ok()?;
            let v: Value = serde_json::from_str(&r.text().await.ok()?).ok()?;
            let value = v["data"]["result"][0]["value"][1].as_str()?.to_string();
            value.parse::<f64>().ok()
        }
    };
    wait_until(
        "prometheus to see the APIService available",
        Duration::from_secs(30),
        || query(r#"aggregator_unavailable_apiservice{name="v1.prom.example.com"}"#),
        |unavailable| *unavailable == Some(0.0),
    )
    .await;
    assert!(query(
        r#"apiagg_proxy_requests_total{group="prom.example.com",version="v1",code="200"}"#
    )
    .await
    .is_some_and(|v| v >= 25.0));
    assert!(
        query(r#"apiagg_proxy_request_duration_seconds_count{group="prom.example.com"}"#)
            .await
            .is_some_and(|v| v >= 25.0)
    );
    assert!(
        query(r#"apiagg_backend_endpoint_healthy{apiservice="v1.prom.example.com"}"#).await
            == Some(1.0)
    );
    assert!(query(
        r#"apiserver_request_total{subresource="apis",component="apiserver",code="200"}"#
    )
    .await
    .is_some_and(|v| v >= 1.0));
    assert!(query("aggregator_discovery_aggregation_count_total")
        .await
        .is_some_and(|v| v >= 1.0));
    assert!(query(r#"apiagg_config_reloads_total{result="success"}"#).await == Some(1.0));

    drop(b.take());
    let _ = status_code(&gw.url("/apis/prom.example.com/v1/foos")).await;
    wait_until(
        "prometheus to see the APIService unavailable (the gauge and the counter observed)",
        Duration::from_secs(30),
        || async {
            let gauge = r#"aggregator_unavailable_apiservice{name="v1.prom.example.com"}"#;
            let total = r#"aggregator_unavailable_apiservice_total{name="v1.prom.example.com",reason="FailedDiscoveryCheck"}"#;
            (query(gauge).await, query(total).await)
        },
        |seen| *seen == (Some(1.0), Some(1.0)),
    )
    .await;
}
