//! Request bodies in CBOR and YAML reach `requestObject` as JSON (kubernetes#139419).

use std::time::{Duration, SystemTime};

use apiagg_requestinfo::RequestInfo;
use prometheus::Registry;
use serde_json::json;

use crate::testing::{connect, policy_file, TestUser};
use crate::{AuditId, Auditor, Begin, LogSettings, Settings};

/// Each `(content type, body)` sent as a server-side apply at level `Request` through an
/// auditor whose capture limit is `limit`; the `ResponseComplete` events in order.
async fn audited(limit: usize, bodies: &[(&str, &[u8])]) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit.log");
    let rules =
        "omitStages: [RequestReceived]\nrules:\n- level: Request\n  omitManagedFields: true\n";
    let settings = Settings {
        policy_file: Some(policy_file(dir.path(), rules)),
        log: Some(LogSettings::new(&path)),
        body_limit: limit,
        ..Settings::default()
    };
    let auditor = Auditor::start(settings, &Registry::new(), &connect).expect("start");
    let uri = "/apis/wardle.example.com/v1alpha1/namespaces/a/flunders/f?fieldManager=t";
    let (target, query) = uri.split_once('?').expect("query");
    let info = RequestInfo::new("PATCH", target, Some(query)).expect("info");
    for (content_type, body) in bodies {
        let begin = Begin {
            id: AuditId::new(),
            user: TestUser::new("alice", &[]),
            impersonated: None,
            info: &info,
            request_uri: uri,
            source_ips: &[],
            user_agent: None,
            received: SystemTime::now(),
        };
        let mut audit = auditor.begin(begin).expect("audited");
        assert!(audit.wants_request_body());
        audit.request_content_type(content_type);
        for piece in body.chunks(5) {
            audit.request_body(piece);
        }
        audit.complete(200, None);
    }
    auditor.shutdown(Duration::from_secs(5)).await;
    let text = std::fs::read_to_string(&path).expect("log");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test]
async fn cbor_and_yaml_bodies_are_recorded_as_json() {
    let object = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
        "metadata": {"name": "f", "managedFields": [{"manager": "t"}]}, "spec": {"n": 1.5}});
    let cbor = apiagg_apis::to_cbor(&object).expect("cbor");
    let yaml = "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\n\
        metadata:\n  name: f\n  managedFields:\n  - manager: t\nspec:\n  n: 1.5\n";
    let events = audited(
        1 << 20,
        &[
            ("application/apply-patch+cbor", &cbor),
            ("application/cbor; charset=binary", &cbor),
            ("application/apply-patch+yaml", yaml.as_bytes()),
            ("Application/YAML;charset=utf-8", yaml.as_bytes()),
            ("application/apply-patch+yaml", b"a: [unclosed"),
            ("application/cbor", b"\x82\x01"),
            ("application/vnd.kubernetes.protobuf", b"k8s\x00\x0a"),
        ],
    )
    .await;
    let mut stripped = object.clone();
    stripped["metadata"]
        .as_object_mut()
        .expect("metadata")
        .shift_remove("managedFields");
    for event in &events[..4] {
        assert_eq!(event["requestObject"], stripped, "{event}");
    }
    let why = |e: &serde_json::Value| e["annotations"]["audit.apiagg.io/request-object"].clone();
    assert_eq!(
        why(&events[4]),
        "omitted: the YAML body cannot be transcoded to JSON"
    );
    assert_eq!(
        why(&events[5]),
        "omitted: the CBOR body cannot be transcoded to JSON"
    );
    assert_eq!(why(&events[6]), "omitted: the body is not JSON");
    assert!(events[4..].iter().all(|e| e.get("requestObject").is_none()));
    assert_eq!(events.len(), 7);
}

#[tokio::test]
async fn transcoded_json_must_fit_the_body_limit() {
    // 40 bytes of CBOR whose JSON is 6 bytes per byte (`\u0000`).
    let mut cbor = vec![0x78, 40];
    cbor.extend([0u8; 40]);
    let events = audited(64, &[("application/cbor", &cbor)]).await;
    assert_eq!(
        events[0]["annotations"]["audit.apiagg.io/request-object"],
        "omitted: the body is larger than 64 bytes"
    );
}
