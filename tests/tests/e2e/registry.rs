//! The registry controller reacts to what routes: a write that changes only an APIService's
//! status (the availability controller's own, or a caller's) rebuilds nothing, so no backend's
//! discovery or OpenAPI is downloaded again; a spec change is routed at once.

use std::time::Duration;

use apiagg_tests::api::{remote, send};
use apiagg_tests::{sample, wait_until, Apiagg, Sample, G, V};
use serde_json::Value;

const API: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

/// The backend's discovery and OpenAPI v3 downloads so far (its `/debug/requests` log; the
/// availability probes ask `/apis/<group>/<version>`, not these; v2 is read only once a client
/// asks for it).
async fn downloads(backend: &Sample) -> (u64, u64) {
    (
        backend.requests("/apis").await,
        backend.requests("/openapi/v3").await,
    )
}

/// Waits until the downloads stay the same for a second (start-up rounds done).
async fn settled(backend: &Sample) -> (u64, u64) {
    let mut last = None;
    let mut stable_since = std::time::Instant::now();
    wait_until(
        "the downloads to stay the same for a second",
        Duration::from_secs(30),
        || downloads(backend),
        |now| {
            if last != Some(*now) {
                (last, stable_since) = (Some(*now), std::time::Instant::now());
            }
            stable_since.elapsed() >= Duration::from_secs(1)
        },
    )
    .await
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
    wait_until(
        &format!("{name} to be Available (its status observed)"),
        Duration::from_secs(20),
        || async { send(reqwest::Method::GET, &one, None).await.1["status"].clone() },
        |status| {
            status["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Available" && c["status"] == "True")
            })
        },
    )
    .await;
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
    // The same window in which a spec change is seen (below) passes without a download. The
    // wait is what is tested: the counts only grow, so one look after the window sees any
    // download made in it.
    let window = Duration::from_secs(3);
    tokio::time::sleep(window).await;
    assert_eq!(
        downloads(&backend).await,
        before,
        "a status write made apiagg download again"
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
    wait_until(
        "a spec change to be read again (discovery and OpenAPI downloads observed)",
        window,
        || downloads(&backend),
        |now| now.0 > before.0 && now.1 > before.1,
    )
    .await;
}
