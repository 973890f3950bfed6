//! The APIService API's stores: watches resume from a resourceVersion (410 for a too-old one),
//! registrations survive a restart, and every acknowledged write survives `kill -9`.

use std::time::Duration;

use apiagg_tests::api::{object, send};
use apiagg_tests::{client, status_code, wait_until, Apiagg};
use serde_json::{json, Value};

const API: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

/// Reads watch events until a DELETED one arrived.
async fn until_deleted(resp: reqwest::Response) -> Vec<Value> {
    let mut resp = resp;
    let mut buffer = Vec::new();
    let mut out: Vec<Value> = Vec::new();
    while out.last().is_none_or(|e| e["type"] != "DELETED") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
            .await
            .expect("an event within 10 s")
            .expect("chunk")
            .expect("the watch ended early");
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            out.push(serde_json::from_slice(&line).expect("event JSON"));
        }
    }
    out
}

fn rv(event: &Value) -> u64 {
    event["object"]["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("rv")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_resume_and_registrations_survive_a_restart() {
    let config = "apiServices:\n  - {apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {name: v1.declared.io}, spec: {group: declared.io, version: v1, groupPriorityMinimum: 1000, versionPriority: 15}}\n";
    let gw = Apiagg::start(config, &[]);
    gw.wait_ready().await;
    let api = gw.url(API);
    let watch = client()
        .get(format!(
            "{api}?watch=true&fieldSelector=metadata.name%3Dv1.a.io"
        ))
        .send()
        .await
        .expect("watch");
    let (code, created) = send(
        reqwest::Method::POST,
        &api,
        Some(("application/json", object("v1.a.io", "a.io"))),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let one = format!("{api}/v1.a.io");
    let patch = json!({"metadata": {"labels": {"team": "x"}}});
    let (code, _) = send(
        reqwest::Method::PATCH,
        &one,
        Some(("application/merge-patch+json", patch)),
    )
    .await;
    assert_eq!(code, 200);
    let (code, _) = send(reqwest::Method::DELETE, &one, None).await;
    assert_eq!(code, 200);
    // Every change in order (the availability controller's status writes among them).
    let seen = until_deleted(watch).await;
    assert_eq!(seen[0]["type"], "ADDED", "{seen:?}");
    assert!(
        seen[1..seen.len() - 1]
            .iter()
            .all(|e| e["type"] == "MODIFIED"),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|e| e["object"]["metadata"]["labels"]["team"] == "x"),
        "{seen:?}"
    );
    assert!(seen.windows(2).all(|w| rv(&w[0]) < rv(&w[1])), "{seen:?}");
    // Resume after the first event: the same changes again.
    let resumed = client()
        .get(format!("{api}?watch=true&resourceVersion={}", rv(&seen[0])))
        .send()
        .await
        .expect("watch");
    let rest = until_deleted(resumed).await;
    let revisions = |events: &[Value]| events.iter().map(rv).collect::<Vec<_>>();
    assert_eq!(revisions(&rest), revisions(&seen[1..]));

    // Invalid objects are refused with the upstream message, and nothing is stored.
    let mut bad = object("v1.b.io", "b.io");
    bad["spec"]["groupPriorityMinimum"] = json!(30000);
    let (code, status) = send(reqwest::Method::POST, &api, Some(("application/json", bad))).await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (422, Some("Invalid")),
        "{status}"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap_or("")
            .contains("must be positive and less than 20000"),
        "{status}"
    );
    assert_eq!(status_code(&format!("{api}/v1.b.io")).await, 404);
    // The config file's APIServices are listed but read-only.
    let (code, status) = send(
        reqwest::Method::DELETE,
        &format!("{api}/v1.declared.io"),
        None,
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (405, Some("MethodNotAllowed")),
        "{status}"
    );
    let (code, status) = send(
        reqwest::Method::POST,
        &api,
        Some(("application/json", object("v1.declared.io", "declared.io"))),
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (409, Some("AlreadyExists")),
        "{status}"
    );

    // A registration survives a restart; an old revision is gone (410) afterwards.
    let (code, _) = send(
        reqwest::Method::POST,
        &api,
        Some(("application/json", object("v1.c.io", "c.io"))),
    )
    .await;
    assert_eq!(code, 201);
    let Apiagg { mut proc, dir, .. } = gw;
    proc.signal("TERM");
    proc.wait_exit(Duration::from_secs(10));
    let gw = Apiagg::start_in(dir, config, &[], &[]);
    gw.wait_ready().await;
    let api = gw.url(API);
    let (code, list) = send(reqwest::Method::GET, &api, None).await;
    assert_eq!(code, 200);
    let names: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["v1.c.io", "v1.declared.io"]);
    let (code, status) = send(
        reqwest::Method::GET,
        &format!("{api}?watch=true&resourceVersion=1"),
        None,
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (410, Some("Expired")),
        "{status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_write_survives_kill_9() {
    let gw = Apiagg::start("", &[]);
    gw.wait_ready().await;
    let api = gw.url(API);
    let acknowledged = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut writers = Vec::new();
    for w in 0..8 {
        let (api, acknowledged) = (api.clone(), acknowledged.clone());
        writers.push(tokio::spawn(async move {
            let client = client();
            for i in 0..125 {
                let name = format!("v{w}x{i}.burst.io");
                let mut body = object(&name, "burst.io");
                body["spec"]["version"] = json!(format!("v{w}x{i}"));
                let sent = client.post(&api).json(&body).send().await;
                match sent {
                    Ok(r) if r.status() == 201 => acknowledged
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(name),
                    // The process is gone: nothing more is acknowledged.
                    _ => return,
                }
            }
        }));
    }
    // Kill in the middle of the burst.
    wait_until(
        "the burst to get going: 200 registrations acknowledged",
        Duration::from_secs(20),
        || async { acknowledged.lock().unwrap_or_else(|e| e.into_inner()).len() },
        |count| *count >= 200,
    )
    .await;
    let Apiagg { proc, dir, .. } = gw;
    proc.signal("KILL");
    for w in writers {
        let _ = w.await;
    }
    drop(proc);
    let acknowledged = acknowledged
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert!(acknowledged.len() < 1000, "the kill came after the burst");
    let gw = Apiagg::start_in(dir, "", &[], &[]);
    gw.wait_ready().await;
    let (code, list) = send(reqwest::Method::GET, &gw.url(API), None).await;
    assert_eq!(code, 200);
    let stored: std::collections::HashSet<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|n| !stored.contains(n.as_str()))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged writes lost: {lost:?}",
        lost.len()
    );
}
