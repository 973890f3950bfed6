use serde_json::json;

use super::*;

fn remote(name: &str, group: &str) -> Value {
    json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name, "resourceVersion": "99", "labels": {"a": "b"}},
        "spec": {"group": group, "version": "v1", "groupPriorityMinimum": 1000,
            "versionPriority": 15, "service": {"namespace": "ns", "name": "svc"}},
        "status": {"conditions": [{"type": "Available", "status": "True"}]}})
}

const NOW: &str = "2026-11-23T20:00:00Z";

#[test]
fn create_resets_status_and_sets_server_fields() {
    let stored = prepare_create(&remote("v1.a.io", "a.io"), "uid-1", NOW).expect("create");
    assert_eq!(stored["status"], json!({}));
    assert_eq!(stored["metadata"]["uid"], "uid-1");
    assert_eq!(stored["metadata"]["generation"], 1);
    assert!(stored["metadata"].get("resourceVersion").is_none());
    assert_eq!(stored["spec"]["service"]["port"], 443);
    let mut local = remote("v1.b.io", "b.io");
    local["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("service");
    let stored = prepare_create(&local, "uid-2", NOW).expect("create");
    assert_eq!(stored["status"]["conditions"][0]["reason"], "Local");
}

#[test]
fn invalid_objects_are_refused_with_upstream_messages() {
    let err = prepare_create(&remote("wrong", "a.io"), "u", NOW).expect_err("invalid");
    assert!(
        err.to_string()
            .contains("must be `spec.version+\".\"+spec.group`"),
        "{err}"
    );
}

#[test]
fn update_keeps_status_and_bumps_generation_on_spec_change() {
    let old = prepare_create(&remote("v1.a.io", "a.io"), "uid-1", NOW).expect("create");
    let mut old = old;
    old["status"] = json!({"conditions": [{"type": "Available", "status": "True"}]});
    let mut body = old.clone();
    body["status"] = json!({});
    body["metadata"]["uid"] = json!("forged");
    let same = prepare_update(&old, &body).expect("update");
    assert_eq!(same["status"], old["status"]);
    assert_eq!(same["metadata"]["uid"], "uid-1");
    assert_eq!(same["metadata"]["generation"], 1);
    body["spec"]["versionPriority"] = json!(20);
    let changed = prepare_update(&old, &body).expect("update");
    assert_eq!(changed["metadata"]["generation"], 2);
}

#[test]
fn status_updates_touch_only_status() {
    let old = prepare_create(&remote("v1.a.io", "a.io"), "uid-1", NOW).expect("create");
    let mut body = old.clone();
    body["spec"]["versionPriority"] = json!(99);
    body["status"] = json!({"conditions": [condition("False", "X", "m", NOW)]});
    let stored = prepare_status_update(&old, &body).expect("status");
    assert_eq!(stored["spec"], old["spec"]);
    assert_eq!(stored["status"]["conditions"][0]["reason"], "X");
    body["status"]["conditions"][0]["status"] = json!("Maybe");
    assert!(prepare_status_update(&old, &body).is_err());
}

#[test]
fn the_four_patch_formats() {
    let current = remote("v1.a.io", "a.io");
    let merged = apply_patch(
        &current,
        PatchKind::Merge,
        br#"{"metadata":{"labels":{"a":null,"c":"d"}}}"#,
    )
    .expect("merge");
    assert_eq!(merged["metadata"]["labels"], json!({"c": "d"}));
    let patched = apply_patch(
        &current,
        PatchKind::Json,
        br#"[{"op":"replace","path":"/spec/versionPriority","value":30}]"#,
    )
    .expect("json patch");
    assert_eq!(patched["spec"]["versionPriority"], 30);
    let strategic = apply_patch(
        &current,
        PatchKind::Strategic,
        br#"{"$setElementOrder/conditions":[{"type":"Available"}],"status":{"conditions":[{"type":"Available","reason":"R"}]},"spec":{"$retainKeys":["x"],"versionPriority":40}}"#,
    )
    .expect("strategic");
    assert_eq!(
        strategic["status"]["conditions"][0],
        json!({"type": "Available", "status": "True", "reason": "R"})
    );
    assert_eq!(strategic["spec"]["versionPriority"], 40);
    let applied = apply_patch(
        &current,
        PatchKind::Apply,
        b"spec:\n  versionPriority: 50\n",
    )
    .expect("apply");
    assert_eq!(applied["spec"]["versionPriority"], 50);
    assert!(matches!(
        PatchKind::from_content_type("text/plain"),
        Err(WriteError::UnsupportedPatch)
    ));
}

#[test]
fn unknown_fields_are_named_with_their_path() {
    let mut body = remote("v1.a.io", "a.io");
    body["spec"]["servce"] = json!({"name": "x"});
    body["metadata"]["labls"] = json!({});
    body["spec"]["caBundle"] = Value::Null;
    assert_eq!(unknown_fields(&body), ["metadata.labls", "spec.servce"]);
    assert!(unknown_fields(&remote("v1.a.io", "a.io")).is_empty());
}
