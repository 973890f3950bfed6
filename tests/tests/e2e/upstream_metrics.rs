//! Upstream's metric names where apiagg exports the same thing, read from `/metrics` as a
//! scraper reads them.

use apiagg_tests::openapi::*;
use apiagg_tests::*;

/// The value of the first `/metrics` sample of `family` whose labels include `labels`.
async fn sample(gw: &Apiagg, family: &str, labels: &[&str]) -> Option<f64> {
    metric_labelled(&client(), &gw.url("/metrics"), family, labels).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_v2_is_counted_like_v3() {
    let w = world(None);
    w.gw.wait_ready().await;
    wait_openapi(&w.gw).await;
    let family = "apiserver_request_total";
    let v2 = [
        r#"subresource="openapi/v2""#,
        r#"code="200""#,
        r#"verb="GET""#,
    ];
    let before = sample(&w.gw, family, &v2).await.unwrap_or(0.0);
    for _ in 0..3 {
        let r = get(&w.gw.url("/openapi/v2"), &[("Accept", "application/json")]).await;
        assert_eq!(r.status(), 200);
    }
    let r = get(&w.gw.url("/openapi/v3"), &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(sample(&w.gw, family, &v2).await, Some(before + 3.0));
    let v3 = [r#"subresource="openapi/v3""#, r#"code="200""#];
    assert!(sample(&w.gw, family, &v3).await.is_some_and(|n| n >= 1.0));
}

/// `apiserver_watch_events_total` and `_sizes{group,version,resource}` (k8s.io/apiserver's
/// `pkg/endpoints/metrics`): one per event of the APIService API's watches, sized as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_events_of_the_apiservice_api_are_counted_and_sized() {
    let wardle = Sample::wardle(&[]);
    let gw = Apiagg::start(&one_backend("wardle", &wardle), &[]);
    gw.wait_ready().await;
    let labels = [
        r#"group="apiregistration.k8s.io""#,
        r#"version="v1""#,
        r#"resource="apiservices""#,
    ];
    let total = "apiserver_watch_events_total";
    assert_eq!(sample(&gw, total, &labels).await, None, "no watch yet");
    let watch = "/apis/apiregistration.k8s.io/v1/apiservices?watch=true&timeoutSeconds=1";
    let mut sent = Vec::new();
    for _ in 0..2 {
        let r = get(&gw.url(watch), &[]).await;
        assert_eq!(r.status(), 200);
        let body = r.text().await.expect("events");
        sent.extend(body.split_inclusive('\n').map(str::len));
    }
    assert!(
        !sent.is_empty(),
        "the watches sent the registered APIServices"
    );
    let count = sent.len() as f64;
    let bytes = sent.iter().sum::<usize>() as f64;
    assert_eq!(sample(&gw, total, &labels).await, Some(count));
    let sizes = "apiserver_watch_events_sizes";
    let sum = format!("{sizes}_sum");
    assert_eq!(sample(&gw, &sum, &labels).await, Some(bytes));
    let all = [&labels[..], &[r#"le="131072""#]].concat();
    assert_eq!(
        sample(&gw, &format!("{sizes}_bucket"), &all).await,
        Some(count)
    );
    let small = [&labels[..], &[r#"le="1024""#]].concat();
    let under_1k = sent.iter().filter(|&&n| n <= 1024).count() as f64;
    assert_eq!(
        sample(&gw, &format!("{sizes}_bucket"), &small).await,
        Some(under_1k)
    );
}
