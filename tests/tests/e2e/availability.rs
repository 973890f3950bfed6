//! Availability, load balancing over endpoints, and metrics, against the real `apiagg` binary,
//! real sample backends and a real Prometheus server.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiagg_tests::*;
use serde_json::Value;

const V2: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

async fn status_of(gw: &Apiagg, name: &str) -> Value {
    let text = client()
        .get(gw.url("/debug/apiagg/status"))
        .send()
        .await
        .expect("status")
        .text()
        .await
        .expect("body");
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    doc["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["name"] == name).cloned())
        .unwrap_or(Value::Null)
}

async fn freshness(gw: &Apiagg, group: &str) -> String {
    let text = client()
        .get(gw.url("/apis"))
        .header("Accept", V2)
        .send()
        .await
        .expect("apis")
        .text()
        .await
        .expect("body");
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    doc["items"]
        .as_array()
        .and_then(|items| items.iter().find(|g| g["metadata"]["name"] == group))
        .map(|g| {
            g["versions"][0]["freshness"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_backend_is_noticed_within_a_second_and_others_never_fail() {
    let flapping_hold = hold_port();
    let flapping_port = flapping_hold.port;
    let mut flapping = Some(backend("a.example.com", "a", flapping_port));
    let steady = backend("b.example.com", "b", 0);
    let config = format!(
        "services:\n{}{}apiServices:\n{}{}",
        service("a", &format!("http://127.0.0.1:{flapping_port}")),
        service("b", &steady.url),
        apiservice_v1("a.example.com", "a"),
        apiservice_v1("b.example.com", "b"),
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let a_url = gw.url("/apis/a.example.com/v1/foos");
    let b_url = gw.url("/apis/b.example.com/v1/foos");
    assert_eq!(status_code(&a_url).await, 200);

    // One client loops on the healthy group the whole time.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let looper = {
        let (stop, ok, failed, url) = (stop.clone(), ok.clone(), failed.clone(), b_url.clone());
        tokio::spawn(async move {
            let c = client();
            while !stop.load(Ordering::Relaxed) {
                match c.get(&url).send().await {
                    Ok(r) if r.status() == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        })
    };

    let mut detect = Vec::new();
    let mut recover = Vec::new();
    for _ in 0..10 {
        drop(flapping.take());
        let gw = &gw;
        let a_url = &a_url;
        let killed = Instant::now();
        wait_until(
            "503 and Stale after the kill",
            Duration::from_secs(10),
            || async {
                (
                    status_code(a_url).await,
                    freshness(gw, "a.example.com").await,
                )
            },
            |(code, freshness)| *code == 503 && freshness == "Stale",
        )
        .await;
        detect.push(killed.elapsed());
        let status = status_of(gw, "v1.a.example.com").await;
        assert_eq!(status["conditions"][0]["status"], "False", "{status}");
        assert_eq!(
            status["conditions"][0]["reason"], "FailedDiscoveryCheck",
            "{status}"
        );

        flapping = Some(backend("a.example.com", "a", flapping_port));
        let restarted = Instant::now();
        wait_until(
            "200 and Current after the restart",
            Duration::from_secs(10),
            || async {
                (
                    status_code(a_url).await,
                    freshness(gw, "a.example.com").await,
                )
            },
            |(code, freshness)| *code == 200 && freshness == "Current",
        )
        .await;
        recover.push(restarted.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    looper.await.expect("looper");
    detect.sort();
    recover.sort();
    eprintln!(
        "detection: median {:?} max {:?}; recovery: median {:?} max {:?}",
        detect[5], detect[9], recover[5], recover[9]
    );
    // The claim is "within a second" (probes every 500 ms); the bounds leave a loaded 2-core
    // machine room and still fail a check that waits for a periodic resync (upstream: 30 s).
    for (what, took) in [("detection", &detect), ("recovery", &recover)] {
        assert!(
            took[5] <= Duration::from_secs(3),
            "{what}: median {:?}",
            took[5]
        );
        assert!(
            took[9] <= Duration::from_secs(10),
            "{what}: slowest {:?}",
            took[9]
        );
    }
    assert!(ok.load(Ordering::Relaxed) > 100);
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "the healthy group saw errors"
    );

    let metrics = get_text(&gw.url("/metrics")).await;
    assert!(
        metrics.contains("aggregator_unavailable_apiservice_total{name=\"v1.a.example.com\",reason=\"FailedDiscoveryCheck\"} 10"),
        "{metrics}"
    );
    assert!(metrics.contains("aggregator_unavailable_apiservice{name=\"v1.a.example.com\"} 0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_moves_to_the_surviving_endpoint_and_back() {
    let (x_hold, y_hold) = (hold_port(), hold_port());
    let (x_port, y_port) = (x_hold.port, y_hold.port);
    let mut x = Some(backend("lb.example.com", "x", x_port));
    let y = backend("lb.example.com", "y", y_port);
    let config = format!(
        "services:\n  - {{namespace: test, name: lb, port: 443, endpoints: [\"http://127.0.0.1:{x_port}\", \"http://127.0.0.1:{y_port}\"]}}\napiServices:\n{}",
        apiservice_v1("lb.example.com", "lb"),
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let url = gw.url("/apis/lb.example.com/v1/foos");

    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicUsize::new(0));
    let served: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (stop, counting, failed, served, url) = (
            stop.clone(),
            counting.clone(),
            failed.clone(),
            served.clone(),
            url.clone(),
        );
        workers.push(tokio::spawn(async move {
            let c = client();
            while !stop.load(Ordering::Relaxed) {
                // Only requests sent after the ejection count: one in flight to the endpoint
                // when it died may fail, as it would with kube-aggregator.
                let counted = counting.load(Ordering::Relaxed);
                let result = c.get(&url).send().await;
                if !counted {
                    continue;
                }
                match result {
                    Ok(r) if r.status() == 200 => {
                        let name = r.headers()["x-sample-server"]
                            .to_str()
                            .unwrap_or("")
                            .to_string();
                        served.lock().expect("lock").push(name);
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    // x dies under load: once both endpoints serve the workers' requests.
    let foos = "/apis/lb.example.com/v1/foos";
    let live = x.as_ref().expect("x");
    wait_until(
        "both endpoints to serve the workers (requests to x and y observed)",
        Duration::from_secs(20),
        || async { (live.requests(foos).await, y.requests(foos).await) },
        |(to_x, to_y)| *to_x >= 5 && *to_y >= 5,
    )
    .await;
    drop(x.take());
    // Count only once apiagg shows x ejected (passive detection or the next probe).
    let killed = Instant::now();
    let status_url = gw.url("/debug/apiagg/status");
    let x_url = format!("http://127.0.0.1:{x_port}");
    let endpoints = || async {
        let Ok(r) = client().get(&status_url).send().await else {
            return Vec::new();
        };
        let doc: Value = r.json().await.unwrap_or_default();
        let items = doc["items"].as_array().cloned().unwrap_or_default();
        let all = items
            .iter()
            .flat_map(|i| i["endpoints"].as_array().cloned());
        all.flatten().collect::<Vec<Value>>()
    };
    wait_until(
        "the dead endpoint to be ejected (the endpoints observed)",
        Duration::from_secs(20),
        endpoints,
        |endpoints| {
            endpoints
                .iter()
                .any(|e| e["url"].as_str() == Some(x_url.as_str()) && e["healthy"] == false)
        },
    )
    .await;
    println!("ejected {:?} after the kill", killed.elapsed());
    counting.store(true, Ordering::Relaxed);
    // More than fifty requests after the ejection (counted, not timed: a loaded machine sends
    // them more slowly).
    wait_until(
        "more than fifty requests served after the ejection",
        Duration::from_secs(30),
        || async { served.lock().expect("lock").len() },
        |n| *n > 50,
    )
    .await;
    let after_kill: Vec<String> = std::mem::take(&mut *served.lock().expect("lock"));
    assert!(
        after_kill.iter().all(|n| n == "y"),
        "requests still reached the dead endpoint"
    );
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "requests failed after the ejection window"
    );
    let status = status_of(&gw, "v1.lb.example.com").await;
    assert_eq!(status["conditions"][0]["reason"], "Passed", "{status}");
    let endpoints = status["endpoints"].as_array().expect("endpoints");
    assert!(endpoints.iter().any(|e| e["healthy"] == false), "{status}");

    x = Some(backend("lb.example.com", "x", x_port));
    wait_until(
        "the restarted endpoint to get traffic again (requests to x observed)",
        Duration::from_secs(5),
        || async {
            served
                .lock()
                .expect("lock")
                .iter()
                .filter(|n| *n == "x")
                .count()
        },
        |to_x| *to_x > 0,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.expect("worker");
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0);
    drop(x);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_carry_the_upstream_reasons_and_messages() {
    let good = backend("good.example.com", "good", 0);
    let failing = fixed_server(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    let config = format!(
        "services:\n{}{}  - {{namespace: test, name: empty, port: 443, endpoints: []}}\napiServices:\n{}{}{}{}",
        service("good", &good.url),
        service("failing", &format!("http://127.0.0.1:{failing}")),
        apiservice_v1("good.example.com", "good"),
        apiservice_v1("failing.example.com", "failing"),
        apiservice_v1("empty.example.com", "empty"),
        apiservice_v1("missing.example.com", "missing"),
    );
    let gw = Apiagg::start(&config, &[]);
    gw.wait_ready().await;
    let gw = &gw;
    wait_until(
        "v1.failing.example.com to fail its discovery check",
        Duration::from_secs(5),
        || status_of(gw, "v1.failing.example.com"),
        |status| status["conditions"][0]["reason"] == "FailedDiscoveryCheck",
    )
    .await;
    let expect = |s: &Value, status: &str, reason: &str| {
        let c = &s["conditions"][0];
        assert_eq!(
            (
                c["type"].as_str(),
                c["status"].as_str(),
                c["reason"].as_str()
            ),
            (Some("Available"), Some(status), Some(reason)),
            "{s}"
        );
        c["message"].as_str().unwrap_or("").to_string()
    };
    let good_status = status_of(gw, "v1.good.example.com").await;
    assert_eq!(expect(&good_status, "True", "Passed"), "all checks passed");
    let failing_status = status_of(gw, "v1.failing.example.com").await;
    let message = expect(&failing_status, "False", "FailedDiscoveryCheck");
    let probe_url = format!("http://127.0.0.1:{failing}/apis/failing.example.com/v1");
    assert_eq!(
        message,
        format!("failing or missing response from {probe_url}: bad status from {probe_url}: 500")
    );
    assert_eq!(
        expect(
            &status_of(gw, "v1.empty.example.com").await,
            "False",
            "MissingEndpoints"
        ),
        "endpoints for service/empty in \"test\" have no addresses with port name \"\""
    );
    assert_eq!(
        expect(
            &status_of(gw, "v1.missing.example.com").await,
            "False",
            "ServiceNotFound"
        ),
        "service/missing in \"test\" is not present"
    );
    // lastTransitionTime only moves when the status changes.
    let before = good_status["conditions"][0]["lastTransitionTime"].clone();
    // Two more probes of the good backend prove two more availability rounds ran.
    let probe_path = "/apis/good.example.com/v1";
    let probes = good.requests(probe_path).await;
    good.wait_requests(probe_path, probes + 2, Duration::from_secs(20))
        .await;
    let after =
        status_of(gw, "v1.good.example.com").await["conditions"][0]["lastTransitionTime"].clone();
    assert_eq!(before, after);
    // An unavailable APIService answers 503 Status saying why.
    let r = client()
        .get(gw.url("/apis/missing.example.com/v1/foos"))
        .send()
        .await
        .expect("503");
    assert_eq!(r.status(), 503);
    let body: Value = serde_json::from_str(&r.text().await.expect("b")).expect("JSON");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("ServiceNotFound"),
        "{body}"
    );

    // `apiagg status` prints the same.
    let out = Command::new(binary("apiagg", "apiagg-gateway"))
        .args(["status", "--server", &gw.url("")])
        .output()
        .expect("apiagg status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("v1.missing.example.com") && text.contains("False (ServiceNotFound)"),
        "{text}"
    );
    assert!(
        text.contains("v1.good.example.com") && text.contains("all checks passed"),
        "{text}"
    );

    // Deleted APIServices leave no series behind.
    let only_good = format!(
        "services:\n{}apiServices:\n{}",
        service("good", &good.url),
        apiservice_v1("good.example.com", "good"),
    );
    gw.write_config(&only_good);
    let metrics_url = gw.url("/metrics");
    // The groups of the series, as the wait sees them.
    let groups = || async {
        let m = get_text(&metrics_url).await;
        ["missing", "failing", "good"].map(|g| m.contains(&format!("{g}.example.com")))
    };
    wait_until(
        "the series of deleted APIServices to go (missing, failing, good observed)",
        Duration::from_secs(5),
        groups,
        |present| *present == [false, false, true],
    )
    .await;
}
