//! The audit backends end to end: a SIGTERM under load loses no event (the backends are flushed
//! after the drain); a webhook that is down or never answers does not slow requests down and
//! its losses are counted, while the log backend still gets every event; a working webhook
//! receives `audit.k8s.io/v1` `EventList` batches holding every event once; the log rotates by
//! size and keeps `--audit-log-maxbackup` files of whole JSON lines.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use apiagg_tests::audit::{
    caller, log_files, metric, metric_sum, read_events, silent_server, tally, wait_complete,
    webhook_kubeconfig, webhook_receiver,
};
use apiagg_tests::*;
use serde_json::{json, Value};

/// flunders at RequestResponse, `/metrics` not audited (reading the counters adds no event),
/// the rest at Metadata.
const POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n\
    - {level: None, nonResourceURLs: [/metrics]}\n\
    - {level: RequestResponse, resources: [{group: wardle.example.com, resources: [flunders]}]}\n\
    - {level: Metadata}\n";

/// A bound for one answer that a loaded 2-core machine stays far below, and a request waiting
/// for a hung webhook (30 s per attempt) would not (no timing is compared).
const PROMPT: Duration = Duration::from_secs(10);

struct Audited {
    gw: Apiagg,
    backend: Sample,
    log: PathBuf,
}

/// apiagg with one backend, the policy above, the audit log and the webhook at `webhook_url`
/// (if any) plus `extra` flags.
async fn audited(webhook_url: Option<&str>, extra: &[&str]) -> Audited {
    let backend = sample(G, "audited", false);
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).expect("policy");
    let log = dir.path().join("audit.log");
    let mut args: Vec<String> = vec![
        "--audit-policy-file".into(),
        policy.to_str().expect("utf8").into(),
        "--audit-log-path".into(),
        log.to_str().expect("utf8").into(),
    ];
    if let Some(url) = webhook_url {
        let kubeconfig = webhook_kubeconfig(dir.path(), url);
        args.extend([
            "--audit-webhook-config-file".into(),
            kubeconfig.to_str().expect("utf8").into(),
            "--audit-webhook-initial-backoff".into(),
            "100ms".into(),
            "--audit-webhook-batch-max-wait".into(),
            "100ms".into(),
        ]);
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let config = format!("{OPEN_FOR_TESTS}{}", one_backend("audited", &backend));
    let gw = Apiagg::start_in_secure(dir, &config, &args);
    gw.wait_ready().await;
    Audited { gw, backend, log }
}

/// `n` GETs of flunders and `/apis`, `workers` at a time: each answer's `Audit-ID` and the
/// slowest answer.
async fn load(gw: &Apiagg, n: usize, workers: usize) -> (Vec<String>, Duration) {
    let urls = [gw.url(&format!("/apis/{G}/{V}/flunders")), gw.url("/apis")];
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let (c, urls) = (client(), urls.clone());
            tokio::spawn(async move {
                let (mut ids, mut slowest) = (Vec::new(), Duration::ZERO);
                for i in (w..n).step_by(workers) {
                    let started = Instant::now();
                    let resp = c.get(&urls[i % 2]).send().await.expect("answered");
                    assert_eq!(resp.status(), 200);
                    let id = resp.headers().get("audit-id").expect("Audit-ID");
                    ids.push(id.to_str().expect("ascii").to_string());
                    resp.bytes().await.expect("body");
                    slowest = slowest.max(started.elapsed());
                }
                (ids, slowest)
            })
        })
        .collect();
    let (mut ids, mut slowest) = (Vec::new(), Duration::ZERO);
    for task in tasks {
        let (mine, slow) = task.await.expect("join");
        ids.extend(mine);
        slowest = slowest.max(slow);
    }
    (ids, slowest)
}

async fn metrics(gw: &Apiagg) -> String {
    get_text(&gw.url("/metrics")).await
}

/// An answer under load: its status, `Audit-ID` and body (`None`: no answer from apiagg).
type Outcome = Option<(u16, Option<String>, String)>;

async fn attempt(c: &reqwest::Client, url: String) -> Outcome {
    let resp = c.get(url).send().await.ok()?;
    let code = resp.status().as_u16();
    let id = resp.headers().get("audit-id").and_then(|v| v.to_str().ok());
    let id = id.map(str::to_string);
    Some((code, id, resp.text().await.ok()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_loses_no_event() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let extra = [
        "--shutdown-delay",
        "0s",
        "--shutdown-drain-timeout",
        "30s",
        "--shutdown-send-retry-after",
    ];
    let mut a = audited(None, &extra).await;
    let url = |path: &str| a.gw.url(path);

    // Slow requests in flight (some queued by flow control), then 16 loops of fast ones.
    let c = caller();
    let slow_url = |i: usize| url(&format!("/apis/{G}/{V}/slow?ms={}", 1000 + i % 11 * 100));
    let slow: Vec<_> = (0..120)
        .map(|i| {
            tokio::spawn({
                let (c, url) = (c.clone(), slow_url(i));
                async move { attempt(&c, url).await }
            })
        })
        .collect();
    let slow_path = format!("/apis/{G}/{V}/slow");
    a.backend
        .wait_requests(&slow_path, 40, Duration::from_secs(20))
        .await;
    let answered = std::sync::Arc::new(AtomicUsize::new(0));
    let urls = [
        url(&format!("/apis/{G}/{V}/flunders")),
        url("/apis"),
        url(&format!("/apis/{G}/{V}")),
    ];
    let fast: Vec<_> = (0..16)
        .map(|w| {
            tokio::spawn({
                let (c, answered, urls) = (caller(), answered.clone(), urls.clone());
                async move {
                    let mut outcomes = Vec::new();
                    for i in 0..25 {
                        let Some(outcome) = attempt(&c, urls[(w + i) % 3].clone()).await else {
                            break;
                        };
                        answered.fetch_add(1, Ordering::SeqCst);
                        outcomes.push(outcome);
                    }
                    outcomes
                }
            })
        })
        .collect();
    wait_until(
        "the fast requests to get going: 50 answered",
        Duration::from_secs(20),
        || async { answered.load(Ordering::SeqCst) },
        |n| *n >= 50,
    )
    .await;
    a.gw.proc.signal("TERM");

    let mut outcomes = Vec::new();
    for task in slow {
        outcomes.extend(task.await.expect("join"));
    }
    let slow_ok = outcomes.iter().filter(|o| o.0 == 200).count();
    for task in fast {
        outcomes.extend(task.await.expect("join"));
    }
    let exit = a.gw.proc.wait_exit(Duration::from_secs(60));
    assert_eq!(
        exit,
        Some(0),
        "apiagg did not exit after the drain:\n{}",
        a.gw.log()
    );
    assert!(
        slow_ok >= 40,
        "slow requests in flight at SIGTERM were not drained: {slow_ok}"
    );

    // Every answer with an Audit-ID has exactly one ResponseComplete, and every
    // ResponseComplete belongs to an answer; the other answers are the shutdown gate's 429s.
    let events = read_events(&a.log);
    let complete = events.iter().filter(|e| e["stage"] == "ResponseComplete");
    let counts = tally(complete.filter_map(|e| e["auditID"].as_str()));
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "ResponseComplete written more than once: {twice:?}"
    );
    let mut audited = std::collections::BTreeSet::new();
    let mut gate = 0;
    for (code, id, body) in &outcomes {
        match id {
            Some(id) => {
                assert!(
                    counts.contains_key(id.as_str()),
                    "no ResponseComplete for {id} ({code})"
                );
                audited.insert(id.as_str());
            }
            None => {
                assert!(
                    *code == 429 && body.contains("shutting down"),
                    "no Audit-ID: {body}"
                );
                gate += 1;
            }
        }
    }
    let unanswered: Vec<_> = counts.keys().filter(|id| !audited.contains(*id)).collect();
    assert!(
        unanswered.is_empty(),
        "events of requests nobody got an answer to: {unanswered:?}"
    );
    let (n, audited) = (outcomes.len(), audited.len());
    println!("{n} answers: {audited} audited, {gate} refused by the shutdown gate");
    assert_eq!(audited + gate, n);
    assert!(
        gate > 0,
        "no request met the shutdown gate: the load did not cover the shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_is_down_slows_nothing_and_every_lost_event_is_counted() {
    let nobody = hold_port();
    let url = format!("http://127.0.0.1:{}/audit", nobody.port);
    let a = audited(Some(&url), &["--audit-webhook-batch-max-size", "10"]).await;

    let (ids, slowest) = load(&a.gw, 60, 4).await;
    assert!(slowest < PROMPT, "an answer took {slowest:?}");
    // Each batch fails its attempts (100 ms backoff, ×1.5) and is dropped: in the end every
    // event generated is counted as lost by the webhook, and the log has them all.
    let lost = "apiagg_audit_events_dropped_total{backend=\"webhook\",reason=\"send_failed\"}";
    let text = wait_until(
        "the webhook's losses to be all counted (the audit series observed)",
        Duration::from_secs(30),
        || async {
            let text = metrics(&a.gw).await;
            let audit: Vec<&str> = text.lines().filter(|l| l.contains("audit")).collect();
            Text(audit.join("\n"))
        },
        |text| {
            let events = metric(&text.0, "apiserver_audit_event_total");
            events >= 120.0 && metric(&text.0, lost) == events
        },
    )
    .await
    .0;
    let audit: Vec<&str> = text.lines().filter(|l| l.contains("audit")).collect();
    let errors = metric(&text, "apiserver_audit_error_total{plugin=\"webhook\"}");
    assert!(errors >= 120.0, "{}", audit.join("\n"));
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    wait_complete(&a.log, &ids).await;
    assert_eq!(
        metric_sum(
            &text,
            "apiagg_audit_events_dropped_total",
            &["backend=\"log\""]
        ),
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_never_answers_slows_nothing_and_its_full_queue_is_counted() {
    let (url, accepted) = silent_server().await;
    let a = audited(Some(&url), &["--audit-webhook-batch-max-size", "1"]).await;
    // The webhook holds every batch it is sent (30 s per attempt): its queue (10,000 events)
    // fills up while requests go on being answered.
    let (first, slowest) = load(&a.gw, 40, 4).await;
    assert!(slowest < PROMPT, "an answer took {slowest:?}");
    wait_until(
        "apiagg to connect to the webhook",
        Duration::from_secs(10),
        || async { *accepted.lock().unwrap_or_else(|e| e.into_inner()) },
        |connections| *connections > 0,
    )
    .await;
    let full = "apiagg_audit_events_dropped_total{backend=\"webhook\",reason=\"queue_full\"}";
    let mut answered = first.len();
    let mut last = first;
    let deadline = Instant::now() + Duration::from_secs(240);
    while metric(&metrics(&a.gw).await, full) == 0.0 {
        assert!(
            Instant::now() < deadline,
            "the queue never filled after {answered} requests"
        );
        let (ids, slowest) = load(&a.gw, 1000, 8).await;
        assert!(
            slowest < PROMPT,
            "an answer took {slowest:?} after {answered} requests"
        );
        answered += ids.len();
        last = ids;
    }
    let text = metrics(&a.gw).await;
    println!("queue full after {answered} requests");
    assert!(
        metric(&text, "apiserver_audit_error_total{plugin=\"buffered\"}") >= metric(&text, full)
    );
    // The log backend's queue is its own: it lost nothing.
    assert_eq!(
        metric_sum(
            &text,
            "apiagg_audit_events_dropped_total",
            &["backend=\"log\""]
        ),
        0.0
    );
    let ids: Vec<&str> = last.iter().map(String::as_str).collect();
    let events = wait_complete(&a.log, &ids).await;
    assert!(
        events.len() >= 2 * answered,
        "{} events for {answered} requests",
        events.len()
    );

    // At exit the hung webhook holds the process no longer than the flush bound (10 s), and
    // the log says the webhook's queued events were not all written.
    let mut gw = a.gw;
    let term = Instant::now();
    gw.proc.signal("TERM");
    let exit = gw.proc.wait_exit(Duration::from_secs(40));
    assert_eq!(exit, Some(0), "{}", gw.log());
    println!("exited {:?} after SIGTERM", term.elapsed());
    let log = gw.log();
    let unfinished = log.lines().any(|l| {
        l.contains("did not finish writing queued events") && l.contains("backend=\"webhook\"")
    });
    assert!(unfinished, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_webhook_receives_every_event_once_in_event_lists() {
    let (url, received) = webhook_receiver().await;
    let a = audited(Some(&url), &["--audit-webhook-batch-max-size", "5"]).await;
    let flunder = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
        "metadata": {"name": "hooked"}, "spec": {"note": "sent to the webhook"}});
    let created = client()
        .post(a.gw.url(&format!("/apis/{G}/{V}/flunders")))
        .json(&flunder)
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    let created_id = created.headers()["audit-id"]
        .to_str()
        .expect("id")
        .to_string();
    let (mut ids, slowest) = load(&a.gw, 20, 2).await;
    assert!(slowest < PROMPT, "an answer took {slowest:?}");
    ids.push(created_id.clone());

    let complete = |events: &[Value], id: &str| {
        events
            .iter()
            .any(|e| e["auditID"] == id && e["stage"] == "ResponseComplete")
    };
    wait_until(
        "the webhook to get every request's events (the IDs still missing observed)",
        Duration::from_secs(20),
        || async {
            let events = received.events();
            let missing = ids.iter().filter(|id| !complete(&events, id));
            missing.cloned().collect::<Vec<String>>()
        },
        Vec::is_empty,
    )
    .await;
    for (path, body) in received.bodies() {
        assert_eq!(
            path, "/audit/events",
            "the kubeconfig's server path is kept"
        );
        assert_eq!(body["kind"], "EventList", "{body}");
        assert_eq!(body["apiVersion"], "audit.k8s.io/v1", "{body}");
        let items = body["items"].as_array().expect("items");
        assert!(
            (1..=5).contains(&items.len()),
            "batches hold 1 to 5 events: {body}"
        );
    }
    // Each request's events arrive once each, as the log has them. Batches travel
    // concurrently (as upstream's webhook sends them), so their order is not asserted.
    let events = received.events();
    let logged = wait_complete(&a.log, &ids.iter().map(String::as_str).collect::<Vec<_>>()).await;
    for id in &ids {
        let stages = |events: &[Value]| -> Vec<Value> {
            let mine = events.iter().filter(|e| e["auditID"] == id.as_str());
            let mut stages: Vec<String> = mine
                .map(|e| e["stage"].as_str().unwrap_or_default().to_string())
                .collect();
            stages.sort();
            stages.into_iter().map(Value::from).collect()
        };
        assert_eq!(
            stages(&events),
            [json!("RequestReceived"), json!("ResponseComplete")],
            "{id}"
        );
        assert_eq!(stages(&events), stages(&logged), "{id}");
    }
    let sent = events
        .iter()
        .find(|e| e["auditID"] == created_id.as_str() && e["stage"] == "ResponseComplete");
    let sent = sent.expect("the create's event");
    assert_eq!(sent["requestObject"], flunder, "{sent}");
    assert_eq!(sent["responseStatus"]["code"], 201, "{sent}");
    let text = metrics(&a.gw).await;
    assert_eq!(
        metric(&text, "apiserver_audit_error_total{plugin=\"webhook\"}"),
        0.0
    );
    drop(a.backend);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_rotates_by_size_and_keeps_its_backups_of_whole_events() {
    let extra = ["--audit-log-maxsize", "1", "--audit-log-maxbackup", "2"];
    let a = audited(None, &extra).await;
    // Each create writes its ~100 KiB body twice (request and response objects): 40 of them
    // make about 8 MiB of log, several rotations of 1 MiB.
    let note = "x".repeat(100 << 10);
    let c = client();
    let mut last = String::new();
    for i in 0..40 {
        let flunder = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
            "metadata": {"name": format!("big-{i}")}, "spec": {"note": note}});
        let resp = c
            .post(a.gw.url(&format!("/apis/{G}/{V}/flunders")))
            .json(&flunder)
            .send()
            .await;
        let resp = resp.expect("create");
        assert_eq!(resp.status(), 201);
        last = resp.headers()["audit-id"].to_str().expect("id").to_string();
    }
    let events = wait_complete(&a.log, &[&last]).await;
    let files = log_files(&a.log);
    assert_eq!(files.len(), 3, "the live log and 2 backups: {files:?}");
    for file in &files {
        let size = std::fs::metadata(file).expect("size").len();
        assert!(size <= 1 << 20, "{} holds {size} bytes", file.display());
    }
    // Every line of every file is a whole event (read_events parsed them all).
    assert!(events.iter().all(|e| e["kind"] == "Event"));
    let objects = events
        .iter()
        .filter(|e| e["responseObject"]["spec"]["note"] == note.as_str());
    assert!(objects.count() >= 5, "the bodies are in the kept files");
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    println!("kept {names:?}, {} events", read_events(&a.log).len());
}
