//! A backend's 429 to a consistent LIST (its watch cache could not serve it, kubernetes#138701)
//! reaches the client as the backend wrote it, `Retry-After` included; apiagg does not retry
//! it and does not count it against the backend: no ejection, the APIService stays Available.

use apiagg_tests::wire::{https_client, tls_apiagg, RawBackend, BUSY_LIST};
use apiagg_tests::*;
use std::time::Duration;

const GV: &str = "/apis/wardle.example.com/v1alpha1";
const NAME: &str = "v1alpha1.wardle.example.com";

/// Availability probes (apiagg's own discovery GETs of the group-version) the backend received.
fn probes(backend: &RawBackend) -> usize {
    let requests = backend.requests();
    requests.iter().filter(|s| s.path == GV).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backends_429_to_a_list_passes_through_once_and_costs_it_nothing() {
    let backend = RawBackend::start(GV).await;
    let config = format!(
        "services:\n{}apiServices:\n{}",
        service("raw", &backend.url()),
        apiservice("wardle.example.com", "v1alpha1", "raw", ""),
    );
    let (gw, ca) = tls_apiagg(&config).await;
    let base = format!("https://127.0.0.1:{}", gw.port);
    let client = https_client(&ca);
    wait_until(
        "the raw backend's APIService to be available",
        Duration::from_secs(20),
        || answer_code(client.get(format!("{base}{GV}/ping"))),
        |code| *code == 200,
    )
    .await;

    // A consistent LIST: no resourceVersion, a page limit.
    let list = format!("{base}{GV}/namespaces/default/busy?limit=500");
    let answer = client
        .get(&list)
        .header("x-test-id", "busy-list")
        .send()
        .await
        .expect("the LIST is answered");
    assert_eq!(answer.status(), 429);
    let retry_after = answer.headers().get("retry-after").cloned();
    assert_eq!(
        retry_after.as_ref().and_then(|v| v.to_str().ok()),
        Some("7")
    );
    assert_eq!(answer.text().await.expect("body"), BUSY_LIST);
    assert_eq!(
        backend.with_id("busy-list").len(),
        1,
        "a 429 is not retried"
    );

    // Two more probe rounds after it: a passive failure would have been reported and published
    // by then.
    let after = probes(&backend);
    wait_until(
        "two availability probes after the 429",
        Duration::from_secs(10),
        || async { probes(&backend) },
        |n| *n >= after + 2,
    )
    .await;
    let label = format!("name=\"{NAME}\"");
    let family = "aggregator_unavailable_apiservice_total";
    let metrics = format!("{base}/metrics");
    let went_unavailable = metric_labelled(&client, &metrics, family, &[&label]).await;
    assert!(
        went_unavailable.unwrap_or(0.0) == 0.0,
        "the APIService went unavailable {went_unavailable:?} times"
    );
    let apiservice = format!("{base}/apis/apiregistration.k8s.io/v1/apiservices/{NAME}");
    let object: serde_json::Value = client
        .get(apiservice)
        .send()
        .await
        .expect("APIService")
        .json()
        .await
        .expect("APIService JSON");
    let conditions = object["status"]["conditions"].as_array().cloned();
    let available = conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c["type"] == "Available");
    assert_eq!(
        available.as_ref().map(|c| c["status"].clone()),
        Some(serde_json::json!("True")),
        "{object}"
    );
    assert_eq!(
        answer_code(client.get(format!("{base}{GV}/ping"))).await,
        200
    );
}
