//! The per-APIService setting of streaming lists: the `apiagg.io/watch-list` annotation makes an
//! APIService's streaming lists pass through (`native`) or be emulated (`emulate`) whatever the
//! backend does, with no probe; a value it cannot take is refused by the APIService API.

use apiagg_tests::streaming::*;
use apiagg_tests::*;
use serde_json::json;

/// An APIService of `backend` as Service `test/<service>`, annotated with `mode`.
fn annotated(backend: &Backend, service: &str, mode: &str) -> String {
    format!(
        "  - apiVersion: apiregistration.k8s.io/v1\n    kind: APIService\n    metadata: {{name: {}, annotations: {{apiagg.io/watch-list: {mode}}}}}\n    spec: {{group: {}, version: {V}, groupPriorityMinimum: 1000, versionPriority: 15, service: {{namespace: test, name: {service}, port: 443}}}}\n",
        backend.apiservice(),
        backend.group
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_annotation_sets_the_mode_without_a_probe() {
    let [ignores, honours, _] = three_backends();
    let config = format!(
        "services:\n{}{}apiServices:\n{}{}",
        service("ign", &ignores.sample.url),
        service("hon", &honours.sample.url),
        annotated(&ignores, "ign", "native"),
        annotated(&honours, "hon", "emulate"),
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    for backend in [&ignores, &honours] {
        backend.create("a", json!({})).await;
    }
    let c = client();

    // `emulate` on a backend that honours streaming lists: apiagg lists and watches.
    let url = gw.url(&format!("{}?{}", honours.path(), streaming_list("")));
    let mut watch = c.get(url).send().await.expect("watch");
    let mut buffer = Vec::new();
    let initial = read_until(&mut watch, &mut buffer, is_initial_events_end).await;
    assert_eq!(named(&initial), pairs(&[("ADDED", "a")]));
    drop(watch);
    honours.wait_query(&["watch=true&resourceVersion="]).await;
    let queries = honours.queries().await;
    assert!(
        !queries.iter().any(|q| q.contains("sendInitialEvents")),
        "no probe, and the client's request never reached it as sent: {queries:?}"
    );

    // `native` on a backend that ignores them: the request reaches it as sent, unprobed.
    let url = gw.url(&format!("{}?{}", ignores.path(), streaming_list("")));
    let mut watch = c.get(url).send().await.expect("watch");
    let mut buffer = Vec::new();
    let first = read_until(&mut watch, &mut buffer, |_| true).await;
    assert_eq!(named(&first), pairs(&[("ADDED", "a")]));
    drop(watch);
    let queries = ignores.queries().await;
    assert!(
        !queries
            .iter()
            .any(|q| q.contains("APIAGG-WATCH-LIST-PROBE")),
        "{queries:?}"
    );
    assert!(
        queries
            .iter()
            .any(|q| q.contains("sendInitialEvents=true&resourceVersionMatch")),
        "{queries:?}"
    );

    for (backend, mode) in [(&ignores, "native"), (&honours, "emulated")] {
        let support = watch_list_status(&gw, &backend.apiservice()).await;
        assert_eq!(support["mode"], mode, "{support}");
        let reason = support["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("apiagg.io/watch-list"), "{support}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_the_annotation_cannot_take_is_refused() {
    let gw = Apiagg::start("services: []\napiServices: []\n", &[]);
    gw.wait_ready().await;
    let object = json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1.bad.example.com", "annotations": {"apiagg.io/watch-list": "sometimes"}},
        "spec": {"group": "bad.example.com", "version": "v1", "groupPriorityMinimum": 1000,
                 "versionPriority": 15, "service": {"namespace": "test", "name": "bad", "port": 443}},
    });
    let resp = client()
        .post(gw.url("/apis/apiregistration.k8s.io/v1/apiservices"))
        .json(&object)
        .send()
        .await
        .expect("create");
    assert_eq!(resp.status(), 422);
    let status: serde_json::Value = resp.json().await.expect("Status");
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(
            "metadata.annotations[apiagg.io/watch-list]: Unsupported value: \"sometimes\""
        ),
        "{status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_annotation_of_a_stored_apiservice_applies_and_follows_changes() {
    let honours = Backend::start("native.example.com", "honours", &["--watch-list", "native"]);
    let gw = Apiagg::start(
        &format!("services:\n{}", service("hon", &honours.sample.url)),
        &[],
    );
    gw.wait_ready().await;
    let c = client();
    let base = gw.url("/apis/apiregistration.k8s.io/v1/apiservices");
    let object = json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": honours.apiservice(), "annotations": {"apiagg.io/watch-list": "emulate"}},
        "spec": {"group": honours.group, "version": V, "groupPriorityMinimum": 1000,
                 "versionPriority": 15, "service": {"namespace": "test", "name": "hon", "port": 443}},
    });
    let created = c.post(&base).json(&object).send().await.expect("create");
    assert_eq!(created.status(), 201);
    let (gw, name) = (&gw, &honours.apiservice());
    let mode = move |want: &'static str, why: &'static str| {
        wait_until(
            why,
            std::time::Duration::from_secs(20),
            move || watch_list_status(gw, name),
            move |status| status["mode"] == want,
        )
    };
    mode("emulated", "the stored annotation (emulated) to apply").await;
    // A merge patch of the annotation alone switches the mode.
    let patch = json!({"metadata": {"annotations": {"apiagg.io/watch-list": "native"}}});
    let patched = c
        .patch(format!("{base}/{}", honours.apiservice()))
        .header("Content-Type", "application/merge-patch+json")
        .json(&patch)
        .send()
        .await
        .expect("patch");
    assert_eq!(patched.status(), 200);
    mode("native", "the patched annotation (native) to apply").await;
}
