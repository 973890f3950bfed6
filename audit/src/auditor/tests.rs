use std::time::SystemTime;

use apiagg_requestinfo::RequestInfo;
use prometheus::Registry;

use super::*;
use crate::testing::{connect, counter, policy_file, run, TestUser, CLIENT_IP};
use crate::{AuditId, LogSettings, StatusSummary};

const POLICY: &str = r#"omitStages: [RequestReceived]
rules:
- level: None
  nonResourceURLs: ["/healthz*"]
- level: RequestResponse
  resources: [{group: "", resources: [configmaps]}]
  omitManagedFields: true
- level: Request
  verbs: [create]
- level: Metadata
"#;

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .expect("read log")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn start(dir: &std::path::Path, rules: &str, log: LogSettings) -> (Auditor, Registry) {
    let registry = Registry::new();
    let settings = Settings {
        policy_file: Some(policy_file(dir, rules)),
        log: Some(log),
        ..Settings::default()
    };
    (
        Auditor::start(settings, &registry, &connect).expect("start"),
        registry,
    )
}

#[tokio::test]
async fn the_log_holds_one_json_event_per_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit/audit.log");
    let (auditor, registry) = start(dir.path(), POLICY, LogSettings::new(&path));
    assert!(auditor.is_enabled());
    let alice = TestUser::new("alice", &["system:authenticated"]);
    let cm =
        br#"{"kind":"ConfigMap","metadata":{"name":"c","managedFields":[{}]},"data":{"k":"v"}}"#;
    assert!(!run(
        &auditor,
        alice.clone(),
        "GET",
        "/healthz",
        (b"", b"ok"),
        200
    ));
    assert!(run(
        &auditor,
        alice.clone(),
        "PUT",
        "/api/v1/namespaces/a/configmaps/c",
        (cm, cm),
        200
    ));
    assert!(run(
        &auditor,
        alice.clone(),
        "POST",
        "/api/v1/namespaces/a/pods",
        (b"{\"kind\":\"Pod\"}", b"{}"),
        201
    ));
    assert!(run(
        &auditor,
        alice,
        "GET",
        "/api/v1/pods?limit=500",
        (b"", b"{}"),
        200
    ));
    auditor.shutdown(Duration::from_secs(5)).await;

    let events = lines(&path);
    assert_eq!(events.len(), 3, "{events:?}");
    let put = &events[0];
    assert_eq!(put["kind"], "Event");
    assert_eq!(put["level"], "RequestResponse");
    assert_eq!(put["stage"], "ResponseComplete");
    assert_eq!(put["verb"], "update");
    assert_eq!(put["sourceIPs"][0], CLIENT_IP.to_string());
    assert_eq!(put["userAgent"], "audit-test/1.0");
    assert_eq!(put["objectRef"]["name"], "c");
    assert_eq!(put["requestObject"]["data"]["k"], "v");
    assert!(put["requestObject"]["metadata"]
        .get("managedFields")
        .is_none());
    assert!(put["responseObject"]["metadata"]
        .get("managedFields")
        .is_none());
    assert_eq!(put["annotations"]["authorization.k8s.io/decision"], "allow");
    assert_eq!(put["annotations"]["authorization.k8s.io/reason"], "");
    let create = &events[1];
    assert_eq!(
        (&create["level"], &create["verb"]),
        (&"Request".into(), &"create".into())
    );
    assert_eq!(create["requestObject"]["kind"], "Pod");
    assert!(create.get("responseObject").is_none());
    assert_eq!(create["responseStatus"]["code"], 201);
    let list = &events[2];
    assert_eq!(
        (&list["level"], &list["verb"]),
        (&"Metadata".into(), &"list".into())
    );
    assert_eq!(list["requestURI"], "/api/v1/pods?limit=500");
    assert!(list.get("requestObject").is_none());

    let level = |l: &str| counter(&registry, "apiserver_audit_level_total", &[("level", l)]);
    assert_eq!(
        [
            level("None"),
            level("Metadata"),
            level("Request"),
            level("RequestResponse")
        ],
        [1, 1, 1, 1]
    );
    assert_eq!(counter(&registry, "apiserver_audit_event_total", &[]), 3);
    assert_eq!(
        counter(
            &registry,
            "apiserver_audit_error_total",
            &[("plugin", "log")]
        ),
        0
    );
}

#[tokio::test]
async fn long_running_requests_write_response_started_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let (auditor, _registry) = start(
        dir.path(),
        "rules:\n- level: RequestResponse\n",
        LogSettings::new(&path),
    );
    let alice = TestUser::new("alice", &[]);
    run(
        &auditor,
        alice.clone(),
        "GET",
        "/api/v1/pods?watch=true",
        (b"", b"{}"),
        200,
    );
    // A request that is dropped without completing still writes its last stage.
    let info = RequestInfo::new("POST", "/api/v1/namespaces/a/pods/p/exec", None).expect("info");
    let audit = auditor.begin(Begin {
        id: AuditId::new(),
        user: alice,
        impersonated: None,
        info: &info,
        request_uri: "/api/v1/namespaces/a/pods/p/exec",
        source_ips: &[],
        user_agent: None,
        received: SystemTime::now(),
    });
    let audit = audit.expect("audited");
    assert!(!audit.wants_request_body() && !audit.wants_response_body());
    drop(audit);
    auditor.shutdown(Duration::from_secs(5)).await;
    let stages: Vec<(String, String)> = lines(&path)
        .iter()
        .map(|e| {
            (
                e["verb"].as_str().unwrap_or("").into(),
                e["stage"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    let expect = |v: &str, s: &str| (v.to_string(), s.to_string());
    assert_eq!(
        stages,
        [
            expect("watch", "RequestReceived"),
            expect("watch", "ResponseStarted"),
            expect("watch", "ResponseComplete"),
            expect("create", "RequestReceived"),
            expect("create", "ResponseStarted"),
            expect("create", "ResponseComplete"),
        ]
    );
    let events = lines(&path);
    assert!(
        events[1].get("responseObject").is_none(),
        "watch bodies are not kept"
    );
    assert_eq!(
        events[5]["responseStatus"]["message"],
        "Connection closed early"
    );
    assert_eq!(events[5]["auditID"], events[3]["auditID"]);
}

#[tokio::test]
async fn own_answers_panics_and_large_bodies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let registry = Registry::new();
    let settings = Settings {
        policy_file: Some(policy_file(
            dir.path(),
            "rules:\n- level: RequestResponse\n",
        )),
        log: Some(LogSettings::new(&path)),
        body_limit: 16,
        ..Settings::default()
    };
    let auditor = Auditor::start(settings, &registry, &connect).expect("start");
    let info = RequestInfo::new("POST", "/api/v1/namespaces/a/pods", None).expect("info");
    let begin = || Begin {
        id: AuditId::new(),
        user: TestUser::new("mallory", &[]),
        impersonated: None,
        info: &info,
        request_uri: "/api/v1/namespaces/a/pods",
        source_ips: &[],
        user_agent: None,
        received: SystemTime::now(),
    };
    let mut audit = auditor.begin(begin()).expect("audited");
    assert_eq!(audit.level(), Level::RequestResponse);
    audit.impersonating(TestUser::new("system:serviceaccount:a:b", &["sa"]));
    audit.authorized("forbid", "no RBAC policy matched");
    audit.request_body(b"{\"kind\":\"Pod\",\"metadata\":{}}");
    audit.complete(
        403,
        Some(StatusSummary {
            status: "Failure".into(),
            message: "pods is forbidden".into(),
            reason: "Forbidden".into(),
        }),
    );
    auditor.begin(begin()).expect("audited").panicked("boom");
    auditor.shutdown(Duration::from_secs(5)).await;
    let events = lines(&path);
    assert!(
        events[0].get("impersonatedUser").is_none(),
        "known after RequestReceived"
    );
    let forbidden = &events[1];
    assert_eq!(forbidden["user"]["username"], "mallory");
    assert_eq!(
        forbidden["impersonatedUser"]["username"],
        "system:serviceaccount:a:b"
    );
    assert_eq!(forbidden["impersonatedUser"]["groups"][0], "sa");
    assert_eq!(forbidden["responseStatus"]["reason"], "Forbidden");
    assert_eq!(forbidden["responseStatus"]["code"], 403);
    assert_eq!(
        forbidden["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
    assert_eq!(
        forbidden["annotations"]["audit.apiagg.io/request-object"],
        "omitted: the body is larger than 16 bytes"
    );
    let panic = &events[3];
    assert_eq!(panic["stage"], "Panic");
    assert_eq!(
        panic["responseStatus"]["message"],
        "APIServer panic'd: boom"
    );
    assert_eq!(panic["responseStatus"]["code"], 500);
    assert_eq!(events.len(), 4);
}

#[tokio::test]
async fn bodies_beyond_the_budget_are_left_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let registry = Registry::new();
    let settings = Settings {
        policy_file: Some(policy_file(
            dir.path(),
            "omitStages: [RequestReceived]\nrules:\n- level: Request\n",
        )),
        log: Some(LogSettings::new(&path)),
        body_budget: 20,
        ..Settings::default()
    };
    let auditor = Auditor::start(settings, &registry, &connect).expect("start");
    let pod = b"{\"kind\":\"Pod\",\"metadata\":{}}";
    run(
        &auditor,
        TestUser::new("a", &[]),
        "POST",
        "/api/v1/namespaces/a/pods",
        (pod, b""),
        201,
    );
    run(
        &auditor,
        TestUser::new("a", &[]),
        "POST",
        "/api/v1/namespaces/a/pods",
        (b"{}", b""),
        201,
    );
    auditor.shutdown(Duration::from_secs(5)).await;
    let events = lines(&path);
    assert_eq!(
        events[0]["annotations"]["audit.apiagg.io/request-object"],
        "omitted: the audit queues hold too much body data"
    );
    assert_eq!(events[1]["requestObject"], serde_json::json!({}));
}

#[tokio::test]
async fn without_a_policy_or_backend_nothing_is_audited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = Registry::new();
    let log_only = Settings {
        log: Some(LogSettings::new(dir.path().join("a.log"))),
        ..Settings::default()
    };
    assert!(!Auditor::start(log_only, &registry, &connect)
        .expect("start")
        .is_enabled());
    let policy_only = Settings {
        policy_file: Some(policy_file(dir.path(), POLICY)),
        ..Settings::default()
    };
    let auditor = Auditor::start(policy_only, &registry, &connect).expect("start");
    assert!(!auditor.is_enabled());
    assert!(!run(
        &auditor,
        TestUser::new("a", &[]),
        "GET",
        "/api",
        (b"", b""),
        200
    ));
    auditor.shutdown(Duration::from_millis(10)).await;
    assert!(!Auditor::disabled().is_enabled());
    let bad = Settings {
        policy_file: Some(dir.path().join("missing.yaml")),
        log: Some(LogSettings::new(dir.path().join("a.log"))),
        ..Settings::default()
    };
    let error = Auditor::start(bad, &registry, &connect)
        .err()
        .expect("refused")
        .to_string();
    assert!(error.contains("missing.yaml"), "{error}");
}

#[tokio::test]
async fn a_new_policy_applies_to_later_requests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let (auditor, _registry) = start(
        dir.path(),
        "rules:\n- level: None\n",
        LogSettings::new(&path),
    );
    assert!(!run(
        &auditor,
        TestUser::new("a", &[]),
        "GET",
        "/api",
        (b"", b""),
        200
    ));
    policy_file(dir.path(), "rules:\n- level: Metadata\n");
    auditor.reload_policy().expect("reload");
    assert!(run(
        &auditor,
        TestUser::new("a", &[]),
        "GET",
        "/api",
        (b"", b""),
        200
    ));
    policy_file(dir.path(), "rules: []\n");
    assert!(auditor.reload_policy().is_err());
    assert!(run(
        &auditor,
        TestUser::new("a", &[]),
        "GET",
        "/api",
        (b"", b""),
        200
    ));
    auditor.shutdown(Duration::from_secs(5)).await;
    assert_eq!(lines(&path).len(), 4);
}
