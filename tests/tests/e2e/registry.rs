//! The registry controller reacts to what routes: a write that changes only an APIService's
//! status (the availability controller's own, or a caller's) rebuilds nothing, so no backend's
//! discovery or OpenAPI is downloaded again; a spec change is routed at once.

use std::time::Duration;

use apiagg_tests::api::{remote, send};
use apiagg_tests::{eventually, sample, Apiagg, Sample, G, V};
use serde_json::Value;

const API: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

/// The backend's discovery and OpenAPI downloads so far (its `/debug/requests` log; the
/// availability probes ask `/apis/<group>/<version>`, not these).
async fn downloads(backend: &Sample) -> (u64, u64) {
    (
        backend.requests("/apis").await,
        backend.requests("/openapi/v2").await,
    )
}

/// Waits until the downloads stay the same for a second (start-up rounds done).
async fn settled(backend: &Sample) -> (u64, u64) {
    let mut last = downloads(backend).await;
    let mut stable_since = tokio::time::Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while stable_since.elapsed() < Duration::from_secs(1) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "downloads never settled: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = downloads(backend).await;
        if now != last {
            (last, stable_since) = (now, tokio::time::Instant::now());
        }
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_writes_download_nothing_and_spec_changes_route_at_once() {
    let backend = sample(G, "wardle", false);
    let config = format!(
        "services:\n{}",
        apiagg_tests::service("wardle", &backend.url)
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let api = gw.url(API);
    let name = format!("{V}.{G}");
    let (code, created) = send(
        reqwest::Method::POST,
        &api,
        Some(("application/json", remote(G, V, "wardle"))),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let one = format!("{api}/{name}");
    let available = eventually(Duration::from_secs(20), || async {
        let (_, object) = send(reqwest::Method::GET, &one, None).await;
        object["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Available" && c["status"] == "True")
        })
    })
    .await;
    assert!(available, "{name} never became Available");
    let before = settled(&backend).await;
    assert!(
        before.0 >= 1 && before.1 >= 1,
        "discovery and OpenAPI were read: {before:?}"
    );

    // Status-only writes: a caller's condition, three times.
    for round in 0..3 {
        let (_, mut object) = send(reqwest::Method::GET, &one, None).await;
        let conditions = object["status"]["conditions"]
            .as_array_mut()
            .expect("conditions");
        conditions.push(serde_json::json!({"type": "Checked", "status": "True",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Test", "message": format!("round {round}")}));
        let (code, answer) = send(
            reqwest::Method::PUT,
            &format!("{one}/status"),
            Some(("application/json", object)),
        )
        .await;
        assert_eq!(code, 200, "{answer}");
    }
    // The same window in which a spec change is seen (below) passes without a download.
    let window = Duration::from_secs(3);
    let moved = eventually(window, || async { downloads(&backend).await != before }).await;
    assert!(
        !moved,
        "a status write made apiagg download again: {before:?} → {:?}",
        downloads(&backend).await
    );

    // A spec change (a new version priority) rebuilds the routes and reads the backend again.
    let (_, mut object): (u16, Value) = send(reqwest::Method::GET, &one, None).await;
    object["spec"]["versionPriority"] = 16.into();
    let (code, answer) = send(
        reqwest::Method::PUT,
        &one,
        Some(("application/json", object)),
    )
    .await;
    assert_eq!(code, 200, "{answer}");
    let read_again = eventually(window, || async {
        let now = downloads(&backend).await;
        now.0 > before.0 && now.1 > before.1
    })
    .await;
    assert!(
        read_again,
        "a spec change was not read again within {window:?}: {:?}",
        downloads(&backend).await
    );
}
