//! CBOR and YAML request bodies reach the audit log as JSON `requestObject`s at level
//! `Request` (kubernetes#139419: kube-apiserver transcodes an apply patch to JSON before the
//! audit logs it): a YAML apply patch and a CBOR create proxied to a backend, and a YAML apply
//! patch to the APIService API; a malformed CBOR body is left out with the reason.

use apiagg_tests::audit::{caller, id_of, note, send, wait_for};
use apiagg_tests::*;
use serde_json::{json, Value};

const POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\n\
    omitStages: [RequestReceived]\nrules:\n- level: Request\n";
const TOKENS: &str = "admin-token,root,uid-root,\"system:masters\"\n";
const FLUNDERS: &str = "/apis/wardle.example.com/v1alpha1/namespaces/audit/flunders";
const APISERVICES: &str = "/apis/apiregistration.k8s.io/v1/apiservices";
const WHY: &str = "audit.apiagg.io/request-object";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cbor_and_yaml_bodies_are_audited_as_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_str().expect("utf8").to_string();
    std::fs::write(path("tokens.csv"), TOKENS).expect("tokens");
    std::fs::write(path("policy.yaml"), POLICY).expect("policy");
    let wardle = Sample::wardle(&["--namespaced"]);
    let config = format!(
        "authentication: {{anonymous: true, tokenFile: tokens.csv}}\n{}",
        one_backend("wardle", &wardle)
    );
    let log = dir.path().join("audit.log");
    let (policy, log_arg) = (path("policy.yaml"), path("audit.log"));
    let args = ["--audit-policy-file", &policy, "--audit-log-path", &log_arg];
    let gw = Apiagg::start_in_secure(dir, &config, &args);
    gw.wait_ready().await;
    let (c, url) = (caller(), |p: &str| gw.url(p));

    // A YAML apply patch to the backend (whatever it answers, the request is audited).
    let apply_uri = format!("{FLUNDERS}/f1?fieldManager=e2e");
    let yaml = "apiVersion: wardle.example.com/v1alpha1\nkind: Flunder\n\
        metadata:\n  name: f1\n  namespace: audit\nspec:\n  note: from YAML # a comment\n";
    let applied = c
        .patch(url(&apply_uri))
        .header("Content-Type", "application/apply-patch+yaml");
    let applied = send(applied.body(yaml)).await;
    // A CBOR create (self-described, byte strings, as client-go writes it).
    let flunder = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
        "metadata": {"name": "f2", "namespace": "audit"}, "spec": {"note": "from CBOR", "n": 3}});
    let cbor = apiagg_tests::cbor::encode(&flunder);
    let created = c
        .post(url(FLUNDERS))
        .header("Content-Type", "application/cbor");
    let created = send(created.body(cbor)).await;
    // Malformed CBOR: left out, with the reason.
    let broken_uri = format!("{FLUNDERS}?broken=1");
    let broken = c
        .post(url(&broken_uri))
        .header("Content-Type", "application/cbor");
    let broken = send(broken.body(&b"\x82\x01"[..])).await;
    // A YAML apply patch to the APIService API.
    let name = "v1.transcode.example.com";
    let apiservice_uri = format!("{APISERVICES}/{name}?fieldManager=e2e");
    let apiservice = format!(
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: {name}\n\
         spec:\n  group: transcode.example.com\n  version: v1\n  groupPriorityMinimum: 100\n  \
         versionPriority: 10\n  service: {{namespace: test, name: wardle, port: 443}}\n"
    );
    let registered = c.patch(url(&apiservice_uri)).bearer_auth("admin-token");
    let registered = registered.header(
        "Content-Type",
        "application/apply-patch+yaml; charset=utf-8",
    );
    let registered = send(registered.body(apiservice)).await;
    assert!(registered.code < 300, "{}", registered.body);

    let ids = [&applied, &created, &broken, &registered].map(|a| a.id.clone());
    assert!(
        ids.iter().all(|id| !id.is_empty()),
        "every answer has an Audit-ID"
    );
    let events = wait_for(&log, |events| {
        ids.iter()
            .all(|id| events.iter().any(|e| e["auditID"] == id.as_str()))
    })
    .await;
    let event = |id: &str| -> Value {
        let found = events
            .iter()
            .find(|e| e["auditID"] == id && e["stage"] == "ResponseComplete");
        found
            .cloned()
            .unwrap_or_else(|| panic!("no event of {id}: {events:?}"))
    };
    let e = event(&ids[0]);
    assert_eq!(e["level"], "Request", "{e}");
    assert_eq!(e["verb"], "patch", "{e}");
    let want = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
        "metadata": {"name": "f1", "namespace": "audit"}, "spec": {"note": "from YAML"}});
    assert_eq!(e["requestObject"], want, "{e}");
    let e = event(&ids[1]);
    assert_eq!(e["requestObject"], flunder, "{e}");
    let e = event(&ids[2]);
    assert!(e.get("requestObject").is_none(), "{e}");
    assert_eq!(
        note(&e, WHY),
        Some("omitted: the CBOR body cannot be transcoded to JSON"),
        "{e}"
    );
    let e = event(&ids[3]);
    assert_eq!(e["requestObject"]["kind"], "APIService", "{e}");
    assert_eq!(
        e["requestObject"]["spec"]["service"]["name"], "wardle",
        "{e}"
    );
    assert_eq!(e["requestObject"]["spec"]["versionPriority"], 10, "{e}");
    assert_eq!(
        id_of(&events, &apiservice_uri, "patch"),
        Some(ids[3].as_str())
    );
}
