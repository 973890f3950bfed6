//! apiagg's metrics as a real Prometheus (Debian's) scrapes and queries them.

use std::process::{Command, Stdio};
use std::time::Duration;

use apiagg_tests::prometheus::Prometheus;
use apiagg_tests::*;

const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

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
    let prometheus = Prometheus::start(&[format!("127.0.0.1:{}", gw.port)], None, &[]);
    let query = |q: &'static str| prometheus.value(q);
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
