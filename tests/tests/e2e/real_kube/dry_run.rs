//! Dry runs of the APIService API (`kubectl --dry-run=server`) at kube-apiserver and at apiagg:
//! an unsupported `dryRun` value gets the same 422; a dry-run create, update and delete answer
//! with the same shape of object (the same metadata fields set) and store nothing.

use apiagg_tests::real_kube::{apiservices_changing, send, RealKube};
use serde_json::{json, Value};

const APISERVICES: &str = "/apis/apiregistration.k8s.io/v1/apiservices";

/// An APIService of a group nobody serves (local: no Service).
fn apiservice(name: &str) -> Value {
    let (version, group) = name.split_once('.').expect("version.group");
    json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": 100,
            "versionPriority": 10}})
}

/// What a client reads of an answer: the code, the Status (reason, message, causes) or the
/// object's kind and the metadata fields it has.
fn read(code: u16, body: &Value) -> Value {
    match body["kind"].as_str() {
        Some("Status") => json!({"code": code, "reason": body["reason"],
            "message": body["message"], "causes": body["details"]["causes"]}),
        kind => {
            let fields = body["metadata"].as_object().map(|m| {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                keys.into_iter().cloned().collect::<Vec<_>>()
            });
            json!({"code": code, "kind": kind, "metadata": fields})
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_answer_as_kube_apiserver_and_store_nothing() {
    let kube = RealKube::shared().await;
    let _alone = apiservices_changing().await;
    let front = kube.apiagg(Some("{mode: Webhook}")).await;
    let admin = kube.client(Some(&kube.admin));
    let stored = apiservice("v1.dry-stored.example.com");
    let path = format!("{APISERVICES}/v1.dry-stored.example.com");
    for base in [kube.kube_url(""), front.url("")] {
        let url = format!("{base}{APISERVICES}");
        let (code, body) = send(&admin, "POST", &url, Some(stored.clone())).await;
        assert!(code == 201 || code == 409, "{body}");
    }
    let fresh = apiservice("v1.dry-new.example.com");
    let mut changed = stored.clone();
    changed["metadata"]["labels"] = json!({"changed": "yes"});
    let rows: [(&str, String, Option<Value>); 5] = [
        (
            "POST",
            format!("{APISERVICES}?dryRun=Some"),
            Some(fresh.clone()),
        ),
        ("POST", format!("{APISERVICES}?dryRun=All"), Some(fresh)),
        (
            "PATCH",
            format!("{path}?dryRun=All"),
            Some(json!({"metadata": {"labels": {"a": "b"}}})),
        ),
        ("DELETE", format!("{path}?dryRun=Bogus"), None),
        ("DELETE", format!("{path}?dryRun=All"), None),
    ];
    let (mut table, mut differ) = (String::new(), Vec::new());
    for (method, target, body) in rows {
        let (code, theirs) = send(&admin, method, &kube.kube_url(&target), body.clone()).await;
        let theirs = read(code, &theirs);
        let (code, ours) = send(&admin, method, &front.url(&target), body).await;
        let ours = read(code, &ours);
        let line = format!("{method} {target}: kube-apiserver {theirs}, apiagg {ours}\n");
        if theirs != ours {
            differ.push(line.clone());
        }
        table += &line;
    }
    // Nothing was stored or changed at apiagg.
    let (code, _) = send(
        &admin,
        "GET",
        &front.url(&format!("{APISERVICES}/v1.dry-new.example.com")),
        None,
    )
    .await;
    assert_eq!(code, 404, "the dry-run create was stored");
    let (code, object) = send(&admin, "GET", &front.url(&path), None).await;
    assert_eq!(code, 200, "the dry-run delete deleted: {object}");
    assert!(
        object["metadata"]["labels"].get("a").is_none(),
        "the dry-run patch was stored: {object}"
    );
    for base in [kube.kube_url(""), front.url("")] {
        send(&admin, "DELETE", &format!("{base}{path}"), None).await;
    }
    eprintln!("dry runs:\n{table}");
    assert!(differ.is_empty(), "dry runs differ:\n{}", differ.concat());
}
