//! The work estimator: request shapes, list estimates from learned sizes, write estimates from
//! open watches, bounded memory.

use std::time::Duration;

use apiagg_requestinfo::RequestInfo;

use crate::{RequestKind, RequestShape, WatchCounts, WorkEstimate, WorkEstimator};

/// Runs `f` on the shape of `method url`.
fn shaped<T>(method: &str, url: &str, f: impl FnOnce(&RequestShape<'_>) -> T) -> T {
    let (path, query) = match url.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (url, None),
    };
    let info = RequestInfo::new(method, path, query).expect("request info");
    f(&RequestShape::from_info(&info))
}

fn estimate(estimator: &WorkEstimator, method: &str, url: &str) -> WorkEstimate {
    shaped(method, url, |s| estimator.estimate(s))
}

fn observe(estimator: &WorkEstimator, url: &str, bytes: u64, items: Option<u64>) {
    shaped("GET", url, |s| estimator.observe_list(s, bytes, items));
}

fn seats(initial_seats: u32) -> WorkEstimate {
    WorkEstimate {
        initial_seats,
        ..WorkEstimate::ONE
    }
}

const MB: u64 = 1_000_000;

#[test]
fn shapes_read_what_the_estimate_needs() {
    shaped(
        "GET",
        "/api/v1/namespaces/ns/pods?limit=500&labelSelector=a%3Db",
        |s| {
            assert_eq!(
                (s.kind, s.namespace, s.resource),
                (RequestKind::List, "ns", "pods")
            );
            assert_eq!((s.limit, s.selector, s.single), (Some(500), true, false));
        },
    );
    shaped(
        "GET",
        "/apis/apps/v1/deployments?watch=1&sendInitialEvents=true",
        |s| {
            assert_eq!(
                (s.kind, s.group, s.send_initial_events),
                (RequestKind::Watch, "apps", true)
            );
        },
    );
    for (method, url) in [
        ("POST", "/api/v1/namespaces/ns/configmaps"),
        ("PUT", "/api/v1/namespaces/ns/configmaps/c"),
        ("PATCH", "/api/v1/namespaces/ns/configmaps/c"),
        ("DELETE", "/api/v1/namespaces/ns/configmaps/c"),
    ] {
        assert_eq!(
            shaped(method, url, |s| s.kind),
            RequestKind::Mutating,
            "{method} {url}"
        );
    }
    let single = "/api/v1/pods?fieldSelector=metadata.name%3Dx&continue=abc&limit=0";
    shaped("GET", single, |s| {
        assert_eq!((s.single, s.continued, s.limit), (true, true, None));
    });
    assert!(shaped("GET", "/api/v1/pods?limit=ten", |s| s.malformed));
    assert_eq!(shaped("GET", "/version", |s| s.kind), RequestKind::Other);
    assert_eq!(
        shaped("GET", "/api/v1/pods/p/log", |s| s.kind),
        RequestKind::Other
    );
}

#[test]
fn lists_cost_their_learned_size_in_100_kb_seats() {
    let e = WorkEstimator::new();
    // Nothing learned: one seat, as upstream for a resource it has no statistics of.
    assert_eq!(estimate(&e, "GET", "/api/v1/pods"), WorkEstimate::ONE);
    observe(&e, "/api/v1/pods", 50 * MB, Some(10_000));
    assert_eq!(
        estimate(&e, "GET", "/api/v1/pods"),
        seats(100),
        "capped at 100"
    );
    observe(&e, "/api/v1/configmaps", 250_000, None);
    assert_eq!(estimate(&e, "GET", "/api/v1/configmaps"), seats(3));
    // One namespace is its own key.
    let in_ns = "/api/v1/namespaces/a/configmaps";
    assert_eq!(estimate(&e, "GET", in_ns), WorkEstimate::ONE);
    // A limit caps the list at limit × the object size (5 KB here).
    assert_eq!(estimate(&e, "GET", "/api/v1/pods?limit=50"), seats(3));
    assert_eq!(estimate(&e, "GET", "/api/v1/pods?limit=500"), seats(25));
    // A selector reads at least half the list; one name reads one object.
    let selected = "/api/v1/pods?limit=50&labelSelector=app%3Dx";
    assert_eq!(estimate(&e, "GET", selected), seats(100));
    let named = "/api/v1/pods?fieldSelector=metadata.name%3Dp";
    assert_eq!(estimate(&e, "GET", named), WorkEstimate::ONE);
    // A watch with initial events is a list; without, one seat.
    let initial =
        "/api/v1/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan";
    assert_eq!(estimate(&e, "GET", initial), seats(100));
    assert_eq!(
        estimate(&e, "GET", "/api/v1/pods?watch=true"),
        WorkEstimate::ONE
    );
    // Malformed list options: the most seats, as upstream.
    let bad = "/api/v1/namespaces/z/secrets?limit=x";
    assert_eq!(estimate(&e, "GET", bad), seats(100));
    // Gets and non-resource requests: one seat.
    assert_eq!(
        estimate(&e, "GET", "/api/v1/namespaces/a/pods/p"),
        WorkEstimate::ONE
    );
    assert_eq!(estimate(&e, "GET", "/healthz"), WorkEstimate::ONE);
}

#[test]
fn learned_sizes_grow_at_once_and_shrink_by_halves() {
    let e = WorkEstimator::new();
    let url = "/apis/apps/v1/namespaces/a/deployments";
    observe(&e, url, 250_000, Some(50));
    observe(&e, url, 2 * MB, Some(400));
    assert_eq!(estimate(&e, "GET", url), seats(20));
    observe(&e, url, 200_000, Some(40));
    assert_eq!(estimate(&e, "GET", url), seats(11), "halfway down: 1.1 MB");
    // A full page of a paginated list, or a later page, only shows a lower bound.
    observe(&e, &format!("{url}?limit=10"), 50_000, Some(10));
    observe(&e, &format!("{url}?continue=abc"), 10_000, Some(2));
    assert_eq!(estimate(&e, "GET", url), seats(11));
    // Writes and gets teach nothing.
    shaped("POST", url, |s| e.observe_list(s, 90 * MB, Some(1)));
    shaped("GET", &format!("{url}/d"), |s| {
        e.observe_list(s, 90 * MB, Some(1))
    });
    assert_eq!(estimate(&e, "GET", url), seats(11));
}

#[test]
fn writes_cost_final_seats_by_their_watchers() {
    let mutating = WorkEstimate::mutating;
    assert_eq!(mutating(0), WorkEstimate::ONE);
    assert_eq!(
        mutating(9),
        WorkEstimate::ONE,
        "small final work is dropped"
    );
    let of = |final_seats, ms| WorkEstimate {
        initial_seats: 1,
        final_seats,
        additional_latency: Duration::from_millis(ms),
    };
    assert_eq!(mutating(10), of(1, 5));
    assert_eq!(mutating(25), of(3, 5));
    // 100 seats' worth: 10 seats for ten times as long.
    assert_eq!(mutating(1000), of(10, 50));

    let e = WorkEstimator::new();
    let watch = |url: &str| shaped("GET", url, |s| e.watches().opened(s));
    let cluster: Vec<_> = (0..25)
        .map(|_| watch("/api/v1/configmaps?watch=1"))
        .collect();
    let in_a: Vec<_> = (0..10)
        .map(|_| watch("/api/v1/namespaces/a/configmaps?watch=1"))
        .collect();
    // Watches of one object are not counted; neither are gets.
    let _named = watch("/api/v1/watch/namespaces/a/configmaps/c");
    let _get = watch("/api/v1/namespaces/a/configmaps");
    assert_eq!(e.watches().count("", "configmaps", ""), 25);
    assert_eq!(
        estimate(&e, "POST", "/api/v1/namespaces/a/configmaps"),
        of(4, 5)
    );
    assert_eq!(
        estimate(&e, "PUT", "/api/v1/namespaces/b/configmaps/c"),
        of(3, 5)
    );
    // deletecollection is not estimated as a write, as upstream: one seat.
    assert_eq!(
        shaped("DELETE", "/api/v1/namespaces/ns/configmaps", |s| s.kind),
        RequestKind::Other
    );
    assert_eq!(
        estimate(&e, "DELETE", "/api/v1/namespaces/a/configmaps"),
        WorkEstimate::ONE
    );
    assert_eq!(
        estimate(&e, "GET", "/api/v1/namespaces/a/configmaps"),
        WorkEstimate::ONE
    );
    drop(cluster);
    assert_eq!(
        estimate(&e, "POST", "/api/v1/namespaces/a/configmaps"),
        of(1, 5)
    );
    drop(in_a);
    assert_eq!(
        estimate(&e, "POST", "/api/v1/namespaces/a/configmaps"),
        WorkEstimate::ONE
    );
    assert_eq!(e.watches().keys(), 0, "closed watches leave nothing behind");
    // Token requests produce no watch event.
    let _sa: Vec<_> = (0..50)
        .map(|_| watch("/api/v1/serviceaccounts?watch=1"))
        .collect();
    let token = "/api/v1/namespaces/a/serviceaccounts/default/token";
    assert_eq!(estimate(&e, "POST", token), WorkEstimate::ONE);
    assert_eq!(
        estimate(&e, "POST", "/api/v1/namespaces/a/serviceaccounts"),
        of(5, 5)
    );
}

#[test]
fn invented_names_cannot_grow_the_maps() {
    let e = WorkEstimator::new();
    for _ in 0..3 {
        observe(&e, "/api/v1/pods", 50 * MB, Some(10_000));
    }
    for i in 0..100_000 {
        observe(&e, &format!("/apis/evil.io/v1/made-up-{i}"), 1, Some(1));
    }
    assert!(
        e.list_keys() <= WorkEstimator::MAX_LIST_KEYS,
        "{}",
        e.list_keys()
    );
    assert!(e.list_keys() > WorkEstimator::MAX_LIST_KEYS / 2);
    // A resource seen repeatedly outlives names seen once.
    assert_eq!(estimate(&e, "GET", "/api/v1/pods"), seats(100));
    // Overlong names are never stored.
    let long = format!("/apis/evil.io/v1/{}", "x".repeat(1000));
    observe(&e, &long, 50 * MB, None);
    assert_eq!(estimate(&e, "GET", &long), WorkEstimate::ONE);

    let watches = WatchCounts::new();
    let guards: Vec<_> = (0..100_000)
        .map(|i| {
            let url = format!("/apis/evil.io/v1/made-up-{i}?watch=1");
            shaped("GET", &url, |s| watches.opened(s))
        })
        .collect();
    assert!(
        watches.keys() <= WatchCounts::MAX_KEYS,
        "{}",
        watches.keys()
    );
    drop(guards);
    assert_eq!(watches.keys(), 0);
}

#[test]
fn shaping_and_estimating_allocate_nothing() {
    let e = WorkEstimator::new();
    observe(&e, "/api/v1/namespaces/a/pods", 5 * MB, Some(100));
    let info =
        RequestInfo::new("GET", "/api/v1/namespaces/b/pods", Some("limit=20")).expect("info");
    let write = RequestInfo::new("POST", "/api/v1/namespaces/b/pods", None).expect("info");
    let before = super::allocations::count();
    let list = e.estimate(&RequestShape::from_info(&info));
    let post = e.estimate(&RequestShape::from_info(&write));
    assert_eq!(super::allocations::count() - before, 0);
    assert_eq!((list, post), (seats(10), WorkEstimate::ONE));
}

#[test]
fn open_watches_are_exported_per_group_and_resource_when_scraped() {
    use prometheus::core::Collector;
    let e = WorkEstimator::new();
    let collector = crate::estimate::OpenWatches::new(e.watches().clone()).expect("collector");
    let watch = |url: &str| shaped("GET", url, |s| e.watches().opened(s));
    let series = || -> Vec<(String, i64)> {
        collector
            .collect()
            .iter()
            .flat_map(|family| family.get_metric().to_vec())
            .map(|m| {
                let labels: Vec<&str> = m.get_label().iter().map(|l| l.value()).collect();
                (labels.join("/"), m.get_gauge().value() as i64)
            })
            .collect()
    };
    let mut open = vec![
        watch("/apis/apps/v1/deployments?watch=1"),
        watch("/apis/apps/v1/namespaces/a/deployments?watch=1"),
        watch("/apis/apps/v1/namespaces/b/deployments?watch=1"),
    ];
    let pods = watch("/api/v1/pods?watch=1");
    // Every namespace together, one series per group and resource.
    assert_eq!(
        series(),
        [
            ("/pods".to_string(), 1),
            ("apps/deployments".to_string(), 3)
        ]
    );
    drop(pods);
    open.pop();
    assert_eq!(series(), [("apps/deployments".to_string(), 2)]);
    drop(open);
    assert!(series().is_empty(), "closed watches leave no series");
}
