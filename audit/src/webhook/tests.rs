use std::time::Duration;

use prometheus::Registry;
use tokio::time::Instant;

use crate::testing::{connect, counter, policy_file, run, TestUser, TestWebhook};
use crate::{AuditError, Auditor, Settings, WebhookSettings};

/// One event per request (`ResponseComplete`).
const POLICY: &str = "omitStages: [RequestReceived]\nrules:\n- level: Metadata\n";

fn settings(dir: &std::path::Path, hook: &TestWebhook) -> WebhookSettings {
    WebhookSettings {
        batch_max_size: 3,
        batch_max_wait: Duration::from_millis(300),
        throttle_enable: false,
        initial_backoff: Duration::from_millis(100),
        ..WebhookSettings::new(hook.kubeconfig(dir))
    }
}

fn start(dir: &std::path::Path, webhook: WebhookSettings) -> (Auditor, Registry) {
    let registry = Registry::new();
    let settings = Settings {
        policy_file: Some(policy_file(dir, POLICY)),
        webhook: Some(webhook),
        ..Settings::default()
    };
    (
        Auditor::start(settings, &registry, &connect).expect("start"),
        registry,
    )
}

fn requests(auditor: &Auditor, n: usize) {
    for i in 0..n {
        let path = format!("/api/v1/namespaces/a/configmaps/c{i}");
        assert!(run(
            auditor,
            TestUser::new("alice", &[]),
            "GET",
            &path,
            (b"", b""),
            200
        ));
    }
}

/// Waits (at most 10 s) until `done` holds.
async fn until(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn dropped(registry: &Registry, reason: &str) -> u64 {
    let labels = [("backend", "webhook"), ("reason", reason)];
    counter(registry, "apiagg_audit_events_dropped_total", &labels)
}

fn errors(registry: &Registry, plugin: &str) -> u64 {
    counter(
        registry,
        "apiserver_audit_error_total",
        &[("plugin", plugin)],
    )
}

#[tokio::test]
async fn events_are_posted_in_batches_as_event_lists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = TestWebhook::start(&[], false).await;
    let (auditor, registry) = start(dir.path(), settings(dir.path(), &hook));
    requests(&auditor, 7);
    until(|| hook.received().events() == 7).await;
    {
        let received = hook.received();
        // Batches are sent concurrently: they may arrive in any order.
        let mut sizes: Vec<usize> = received
            .lists
            .iter()
            .map(|l| l["items"].as_array().map_or(0, Vec::len))
            .collect();
        sizes.sort();
        assert_eq!(sizes, [1, 3, 3]);
        let list = &received.lists[0];
        assert_eq!(list["kind"], "EventList");
        assert_eq!(list["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(list["metadata"], serde_json::json!({}));
        let item = &list["items"][0];
        assert!(item.get("kind").is_none());
        assert_eq!(item["stage"], "ResponseComplete");
        let mut names: Vec<String> = received
            .lists
            .iter()
            .flat_map(|l| l["items"].as_array().cloned().unwrap_or_default())
            .map(|i| i["objectRef"]["name"].as_str().unwrap_or("").to_string())
            .collect();
        names.sort();
        assert_eq!(names, ["c0", "c1", "c2", "c3", "c4", "c5", "c6"]);
        assert_eq!(received.authorization, ["Bearer secret-token"; 3]);
    }
    auditor.shutdown(Duration::from_secs(5)).await;
    assert_eq!(counter(&registry, "apiserver_audit_event_total", &[]), 7);
    assert_eq!(
        errors(&registry, "webhook") + errors(&registry, "buffered"),
        0
    );
}

#[tokio::test]
async fn a_failed_batch_is_retried_after_the_backoff() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = TestWebhook::start(&[500], false).await;
    let (auditor, registry) = start(dir.path(), settings(dir.path(), &hook));
    let sent = Instant::now();
    requests(&auditor, 2);
    until(|| hook.received().events() == 2).await;
    // The batch waited for a third event (300 ms), failed, and came back after ≥ 100 ms.
    assert!(
        sent.elapsed() >= Duration::from_millis(400),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(hook.received().requests, 2);
    auditor.shutdown(Duration::from_secs(5)).await;
    assert_eq!(errors(&registry, "webhook"), 0);
}

#[tokio::test]
async fn a_batch_is_dropped_and_counted_after_the_last_attempt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = TestWebhook::start(&[503, 503, 503], false).await;
    let webhook = WebhookSettings {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(20),
        batch_max_wait: Duration::from_millis(10),
        ..settings(dir.path(), &hook)
    };
    let (auditor, registry) = start(dir.path(), webhook);
    requests(&auditor, 2);
    until(|| errors(&registry, "webhook") == 2).await;
    assert_eq!(hook.received().requests, 3);
    assert_eq!(dropped(&registry, "send_failed"), 2);
    // The webhook heals: later events go through.
    requests(&auditor, 1);
    auditor.shutdown(Duration::from_secs(5)).await;
    assert_eq!(hook.received().events(), 1);
}

#[tokio::test]
async fn a_webhook_that_never_answers_does_not_slow_requests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = TestWebhook::start(&[], true).await;
    let webhook = WebhookSettings {
        buffer_size: 10,
        batch_max_size: 5,
        batch_max_wait: Duration::from_millis(10),
        request_timeout: Duration::from_secs(60),
        ..settings(dir.path(), &hook)
    };
    let (auditor, registry) = start(dir.path(), webhook);
    let began = Instant::now();
    requests(&auditor, 2000);
    let took = began.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "2000 audited requests took {took:?}"
    );
    assert!(dropped(&registry, "queue_full") > 0);
    let began = Instant::now();
    auditor.shutdown(Duration::from_millis(300)).await;
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    // Every event is accounted for: none was delivered, each drop was counted.
    until(|| dropped(&registry, "queue_full") + dropped(&registry, "shutdown") == 2000).await;
    assert_eq!(counter(&registry, "apiserver_audit_event_total", &[]), 2000);
    assert_eq!(
        errors(&registry, "buffered"),
        dropped(&registry, "queue_full")
    );
    assert_eq!(hook.received().events(), 0);
}

#[tokio::test]
async fn shutdown_sends_everything_queued() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = TestWebhook::start(&[], false).await;
    let webhook = WebhookSettings {
        batch_max_size: 20,
        batch_max_wait: Duration::from_secs(3600),
        ..WebhookSettings::new(hook.kubeconfig(dir.path()))
    };
    let (auditor, registry) = start(dir.path(), webhook);
    requests(&auditor, 50);
    until(|| hook.received().events() == 40).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        hook.received().events(),
        40,
        "two full batches; ten wait for more"
    );
    auditor.shutdown(Duration::from_secs(5)).await;
    assert_eq!(hook.received().events(), 50);
    assert_eq!(counter(&registry, "apiserver_audit_event_total", &[]), 50);
    // After shutdown, events are dropped and counted.
    requests(&auditor, 1);
    assert_eq!(dropped(&registry, "shutdown"), 1);
}

#[tokio::test]
async fn unusable_kubeconfigs_and_settings_are_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let refuse = |webhook: WebhookSettings| {
        let settings = Settings {
            policy_file: Some(policy_file(dir.path(), POLICY)),
            webhook: Some(webhook),
            ..Settings::default()
        };
        Auditor::start(settings, &Registry::new(), &connect)
            .err()
            .expect("refused")
    };
    let missing = refuse(WebhookSettings::new(dir.path().join("nope")));
    assert!(matches!(missing, AuditError::Webhook { .. }), "{missing}");
    assert!(missing.to_string().contains("nope"), "{missing}");
    let exec = dir.path().join("exec.kubeconfig");
    std::fs::write(
        &exec,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://h/a'}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {exec: {command: x, apiVersion: client.authentication.k8s.io/v1}}}]\n",
    )
    .expect("write");
    let error = refuse(WebhookSettings::new(&exec)).to_string();
    assert!(
        error.contains("exec and auth-provider credentials are not supported"),
        "{error}"
    );
    let zero = refuse(WebhookSettings {
        batch_max_size: 0,
        ..WebhookSettings::new(&exec)
    });
    assert_eq!(
        zero.to_string(),
        "invalid audit batch webhook max batch size 0, must be a positive number"
    );
}
