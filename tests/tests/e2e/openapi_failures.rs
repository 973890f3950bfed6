//! OpenAPI merging when backends fail: a dead backend, malformed documents, garbage answers.
//! The last good documents stay and the gateway keeps serving.

use std::time::Duration;

use apiagg_tests::openapi::*;
use apiagg_tests::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_backend_keeps_its_last_good_documents() {
    let mut w = world(None);
    w.gw.wait_ready().await;
    wait_openapi(&w.gw).await;
    let before_index = index(&w.gw).await;
    let before_v2 = get(&w.gw.url("/openapi/v2"), &[]).await;
    let v2_etag = header(&before_v2, "etag");

    w.oauth = None; // killed
                    // The refresh that failed is recorded before anything is compared.
    let metrics_url = w.gw.url("/metrics");
    let failures = || async {
        let body = get(&metrics_url, &[])
            .await
            .text()
            .await
            .unwrap_or_default();
        let series = body
            .lines()
            .filter(|l| l.starts_with("apiagg_openapi_download_failures_total"));
        series.map(str::to_string).collect::<Vec<_>>()
    };
    wait_until(
        "a failed download of the dead backend to be recorded (the failure series observed)",
        Duration::from_secs(20),
        failures,
        |series| {
            let source = "apiagg_openapi_download_failures_total{source=\"test/oauth";
            series.iter().any(|l| l.starts_with(source))
        },
    )
    .await;

    assert_eq!(index(&w.gw).await, before_index);
    let r = get(&w.gw.url("/openapi/v2"), &[]).await;
    assert_eq!(header(&r, "etag"), v2_etag);
    let url = url_of(&before_index, OAUTH_KEY).expect("oauth");
    let r = get(&w.gw.url(&url), &[]).await;
    assert_eq!(r.status(), 200, "the last good v3 document is still served");

    // Back with the same documents: nothing changes.
    w.oauth = Some(oauth_backend(w.oauth_port, Some(w.oauth_docs.path())));
    // Two downloads from the restarted backend: the first was fully processed when the second
    // round asked again.
    let oauth = w.oauth.as_ref().expect("oauth");
    oauth
        .wait_requests("/openapi/v2", 2, Duration::from_secs(20))
        .await;
    assert_eq!(index(&w.gw).await, before_index);
    let r = get(&w.gw.url("/openapi/v2"), &[]).await;
    assert_eq!(header(&r, "etag"), v2_etag);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_documents_never_crash_or_change_the_merge() {
    let w = world(None);
    w.gw.wait_ready().await;
    wait_openapi(&w.gw).await;
    let before_index = index(&w.gw).await;
    let v2_etag = header(&get(&w.gw.url("/openapi/v2"), &[]).await, "etag");

    let docs = w.oauth_docs.path();
    let v3_doc = docs.join("v3/apis__oauth.openshift.io__v1_openapi.json");
    for (v2, v3) in [
        (&b"<html>not OpenAPI</html>"[..], &b"\x00\x01garbage"[..]),
        (&b"{\"swagger\": \"2.0\", \"paths\": 5}"[..], &b"[1, 2, 3]"[..]),
        (
            &b"{\"paths\": {\"/apis/oauth.openshift.io/v1/x\": {\"get\": {\"responses\": {\"200\": {\"schema\": {\"$ref\": \"#/definitions/missing\"}}}}}}}"[..],
            &b"{\"paths\": {}}"[..],
        ),
        (&b"{\"paths\": {\"/apis/oauth.openshift.io/v1/x\": 7}}"[..], &b"{\"openapi\": "[..]),
    ] {
        let oauth = w.oauth.as_ref().expect("oauth");
        let asked = oauth.requests("/openapi/v2").await;
        std::fs::write(docs.join("swagger.json"), v2).expect("write");
        std::fs::write(&v3_doc, v3).expect("write");
        // Two more downloads: the garbage was read and handled by at least one full round.
        oauth
            .wait_requests("/openapi/v2", asked + 2, Duration::from_secs(20))
            .await;
        assert_eq!(get(&w.gw.url("/healthz"), &[]).await.status(), 200);
        let r = get(&w.gw.url("/openapi/v2"), &[]).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "etag"), v2_etag, "{}", String::from_utf8_lossy(v2));
        // The index only changes by the new hash the backend's own index announces for the
        // garbage document; apiagg keeps serving the last good one under its own hash.
        assert_eq!(index(&w.gw).await, before_index, "{}", String::from_utf8_lossy(v3));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_backend_contributes_nothing_and_breaks_nothing() {
    for response in [
        &b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<html>not OpenAPI</html>"[..],
        &b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"paths\": {\"apis/garbage.example.com/v1\": 17}"[..],
        &b"\x00\x01garbage\r\n\r\n"[..],
    ] {
        let port = fixed_server(response).await;
        let w = world(Some(port));
        w.gw.wait_ready().await;
        wait_openapi(&w.gw).await;
        let keys: Vec<String> = index(&w.gw).await.into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys.len(), ALL_KEYS.len(), "{keys:?}");
        let v2 = json(&w.gw.url("/openapi/v2")).await;
        assert!(v2["paths"].get(OAUTH_PATH).is_some());
        assert!(v2["paths"].get("/api/v1/pods").is_some());
        assert_eq!(get(&w.gw.url("/healthz"), &[]).await.status(), 200);
    }
}
