//! Upstream's metric names where apiagg exports the same thing, read from `/metrics` as a
//! scraper reads them.

use apiagg_tests::openapi::*;
use apiagg_tests::*;

/// The value of the first `/metrics` sample of `family` whose labels include every one of
/// `labels` (`name="value"` each), whatever their order.
async fn sample(gw: &Apiagg, family: &str, labels: &[&str]) -> Option<f64> {
    let text = client()
        .get(gw.url("/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .filter_map(|l| l.strip_prefix(family)?.strip_prefix('{'))
        .filter_map(|rest| rest.split_once("} "))
        .find(|(set, _)| labels.iter().all(|l| set.split(',').any(|p| p == *l)))
        .and_then(|(_, value)| value.trim().parse().ok())
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
