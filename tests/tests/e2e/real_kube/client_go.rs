//! client-go v0.37.2 through apiagg: kube-client (`tests/kube/cmd/kube-client`) runs a shared
//! informer on flunders with WatchListClient on, and does aggregated discovery and RESTMapper
//! lookups, against apiagg and against kube-apiserver.

use std::time::{Duration, Instant};

use apiagg_tests::metric_at;
use apiagg_tests::real_kube::{apiservices_steady, events, Front, GoClient, RealKube};
use serde_json::{json, Value};

use super::{flunder, flunders};

/// The `request` lines for flunders (`path` ends in `/flunders`), as `(query, status)`.
fn flunder_requests(lines: &[Value]) -> Vec<(String, i64)> {
    events(lines, "request")
        .into_iter()
        .filter(|r| r["path"].as_str().is_some_and(|p| p.ends_with("/flunders")))
        .map(|r| {
            let query = r["query"].as_str().unwrap_or_default().to_string();
            (query, r["status"].as_i64().unwrap_or(0))
        })
        .collect()
}

/// Waits for the informer's `event` of the flunder `name`; how long since `at`.
async fn saw(client: &mut GoClient, at: Instant, event: &str, name: &str) -> Duration {
    let what = format!("the informer's {event} of {name}");
    let line = client
        .wait_for(&what, Duration::from_secs(20), |l| {
            l["event"] == event && l["name"] == name
        })
        .await;
    if event == "add" {
        assert_eq!(line["initial"], false, "{line}");
    }
    at.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informer_syncs_by_streaming_list_through_apiagg_and_sees_direct_writes() {
    let kube = RealKube::shared().await;
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let ns = "real-kube-informer";
    kube.namespace(ns).await;
    kube.create(&flunders(ns), flunder("before", json!({})))
        .await;
    let (through_apiagg, direct) = front.kubeconfigs(kube, "admin", &kube.admin);

    let mut report = String::new();
    for (to, kubeconfig) in [("apiagg", &through_apiagg), ("kube-apiserver", &direct)] {
        let config = kubeconfig.to_str().expect("path");
        let mut client = GoClient::start(&["informer", "--kubeconfig", config, "--namespace", ns]);
        let start = client
            .wait_for("start", Duration::from_secs(10), |l| l["event"] == "start")
            .await;
        assert_eq!(start["watchListClient"], true, "{start}");
        let synced = client
            .wait_for("synced", Duration::from_secs(30), |l| {
                l["event"] == "synced"
            })
            .await;
        assert_eq!(synced["items"], 1, "{to}: {synced}");
        // Synced by a streaming list: one watch with sendInitialEvents, no list.
        let requests = flunder_requests(&client.seen);
        let streaming = |(query, status): &(String, i64)| {
            *status == 200
                && query.contains("watch=true")
                && query.contains("sendInitialEvents=true")
                && query.contains("resourceVersionMatch=NotOlderThan")
        };
        assert!(
            matches!(requests.as_slice(), [first] if streaming(first)),
            "{to}: the informer's requests before it synced: {requests:?}"
        );
        let initial = events(&client.seen, "add");
        assert!(
            matches!(initial.as_slice(), [add] if add["name"] == "before" && add["initial"] == true),
            "{to}: {initial:?}"
        );

        // Written through kube-apiserver directly, seen by the informer.
        let name = format!("after-{}", to.replace(' ', "-"));
        let at = Instant::now();
        kube.create(&flunders(ns), flunder(&name, json!({}))).await;
        let added = saw(&mut client, at, "add", &name).await;
        let item = format!("{}/{name}", flunders(ns));
        let at = Instant::now();
        let (code, body) = kube.admin("DELETE", &item, None).await;
        assert_eq!(code, 200, "{body}");
        let deleted = saw(&mut client, at, "delete", &name).await;
        let lines = client.finish().await;
        let errors = events(&lines, "watch-error");
        assert!(errors.is_empty(), "{to}: {errors:?}");
        assert!(events(&lines, "error").is_empty(), "{to}: {lines:?}");
        report += &format!(
            "\n  {to}: synced {} ms after start ({:?}), a create seen in {added:?}, a delete in {deleted:?}",
            synced["ms"],
            requests[0].0,
        );
    }
    // apiagg passed the streaming list to sample-apiserver, which serves it (no emulation).
    assert_eq!(
        (
            streams(kube, &front, "native").await,
            streams(kube, &front, "emulated").await
        ),
        (1.0, 0.0),
        "apiagg_watch_list_streams_total (native, emulated)"
    );
    eprintln!("client-go informer (WatchListClient):{report}");
}

/// `apiagg_watch_list_streams_total` of wardle in `mode`.
async fn streams(kube: &RealKube, front: &Front, mode: &str) -> f64 {
    let series = format!(
        "apiagg_watch_list_streams_total{{apiservice=\"v1alpha1.wardle.example.com\",mode=\"{mode}\"}}"
    );
    let admin = kube.client(Some(&kube.admin));
    metric_at(&admin, &front.url("/metrics"), &series)
        .await
        .unwrap_or(0.0)
}

/// What a discovery run says of the group: its `group`, `resources`, `resource-for` and
/// `mapping` lines, without their `event`.
fn discovered(lines: &[Value]) -> Vec<Value> {
    ["group", "resources", "resource-for", "mapping"]
        .into_iter()
        .flat_map(|event| events(lines, event))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_v2_and_restmapper_through_apiagg_find_wardle_as_kube_apiserver() {
    let kube = RealKube::shared().await;
    let _steady = apiservices_steady().await;
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let (through_apiagg, direct) = front.kubeconfigs(kube, "admin", &kube.admin);
    let mut runs = Vec::new();
    for (to, kubeconfig) in [("apiagg", &through_apiagg), ("kube-apiserver", &direct)] {
        let config = kubeconfig.to_str().expect("path");
        let lines = GoClient::run(&["discovery", "--kubeconfig", config]).await;
        assert!(events(&lines, "error").is_empty(), "{to}: {lines:#?}");
        assert!(
            events(&lines, "discovery-failed").is_empty(),
            "{to}: {lines:#?}"
        );
        // Aggregated discovery: /api and /apis answered as APIGroupDiscoveryList, and nothing
        // walked group by group.
        let requests = events(&lines, "request");
        for path in ["/api", "/apis"] {
            let answer = requests.iter().find(|r| r["path"] == path);
            let content_type = answer.map(|r| r["contentType"].as_str().unwrap_or_default());
            assert!(
                content_type.is_some_and(|t| t.contains("as=APIGroupDiscoveryList")),
                "{to}: {path}: {answer:?}"
            );
        }
        let walked: Vec<_> = requests
            .iter()
            .filter(|r| r["path"].as_str().is_some_and(|p| p.starts_with("/apis/")))
            .collect();
        assert!(
            walked.is_empty(),
            "{to} walked legacy discovery: {walked:?}"
        );
        let found = discovered(&lines);
        let names: Vec<&str> = events(&lines, "resources")
            .iter()
            .flat_map(|l| l["resources"].as_array().into_iter().flatten())
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert!(
            names.contains(&"flunders") && names.contains(&"fischers"),
            "{to}: {found:#?}"
        );
        let mapping = events(&lines, "mapping");
        assert!(
            matches!(mapping.as_slice(), [m] if m["gvr"] == "wardle.example.com/v1alpha1, Resource=flunders" && m["scope"] == "namespace"),
            "{to}: {mapping:?}"
        );
        let done = events(&lines, "done");
        eprintln!(
            "client-go discovery through {to}: {} groups, {} ms",
            events(&lines, "groups")[0]["count"],
            done[0]["ms"]
        );
        runs.push((to, found, events(&lines, "groups")[0]["count"].clone()));
    }
    let [(_, ours, our_groups), (_, theirs, their_groups)] = &runs[..] else {
        unreachable!()
    };
    assert_eq!(
        ours, theirs,
        "wardle as client-go reads it: apiagg, kube-apiserver"
    );
    assert_eq!(our_groups, their_groups, "the number of groups");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restmapper_through_apiagg_maps_a_newly_registered_apiservice_in_seconds() {
    let kube = RealKube::shared().await;
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let (through_apiagg, _) = front.kubeconfigs(kube, "admin", &kube.admin);
    let config = through_apiagg.to_str().expect("path");
    // A controller's loop: discovery, then the RESTMapper reset and asked again until it maps
    // Flunder in v1beta1 (sample-apiserver serves it; only apiagg is told).
    let args = [
        "discovery",
        "--kubeconfig",
        config,
        "--until-version",
        "v1beta1",
    ];
    let mut client = GoClient::start(&args);
    client
        .wait_for("waiting", Duration::from_secs(30), |l| {
            l["event"] == "waiting"
        })
        .await;
    let mut beta = kube.apiservice("wardle.example.com", "v1beta1", "api", kube.sample_port);
    // Below v1alpha1: the preferred version stays.
    beta["spec"]["versionPriority"] = json!(100);
    let registered = Instant::now();
    let admin = kube.client(Some(&kube.admin));
    let collection = front.url("/apis/apiregistration.k8s.io/v1/apiservices");
    let (code, body) = apiagg_tests::real_kube::send(&admin, "POST", &collection, Some(beta)).await;
    assert_eq!(code, 201, "{body}");
    let found = client
        .wait_for("found", Duration::from_secs(30), |l| {
            l["event"] == "found" || l["event"] == "error"
        })
        .await;
    let took = registered.elapsed();
    assert_eq!(found["event"], "found", "{found}");
    assert_eq!(
        found["gvr"], "wardle.example.com/v1beta1, Resource=flunders",
        "{found}"
    );
    let lines = client.finish().await;
    assert!(events(&lines, "error").is_empty(), "{lines:#?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    eprintln!(
        "client-go RESTMapper mapped Flunder in v1beta1 {took:?} after the APIService was created at apiagg ({} discoveries)",
        found["attempts"]
    );
}
