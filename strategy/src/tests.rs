use serde_json::{json, Value};

use super::*;
use crate::managed_fields::Subresource;

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
    // kube-aggregator's strategy gives APIServices no generation.
    assert!(stored["metadata"].get("generation").is_none());
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
fn bodies_are_decoded_as_kube_apiserver_decodes_them() {
    let mut body = remote("v1.a.io", "a.io");
    body["spec"]["caBundle"] = json!("YWJj\nZGVm\r\n");
    let stored = prepare_create(&body, "u", NOW).expect("line breaks");
    assert_eq!(stored["spec"]["caBundle"], "YWJjZGVm");
    body["spec"]["caBundle"] = json!("YWJ");
    assert_eq!(
        prepare_create(&body, "u", NOW).expect_err("padding").to_string(),
        "APIService in version \"v1\" cannot be handled as a APIService: illegal base64 data at input byte 0"
    );
    body["kind"] = json!("Foo");
    body["apiVersion"] = json!("v1");
    assert_eq!(
        prepare_create(&body, "u", NOW).expect_err("kind").to_string(),
        "Foo in version \"v1\" cannot be handled as a APIService: no kind \"Foo\" is registered for version \"v1\" in scheme \"pkg/runtime/scheme.go:111\""
    );
    body["kind"] = json!("APIService");
    body["apiVersion"] = json!("apiregistration.k8s.io/v1beta1");
    assert_eq!(
        prepare_create(&body, "u", NOW).expect_err("version").to_string(),
        "the API version in the data (apiregistration.k8s.io/v1beta1) does not match the expected API version (apiregistration.k8s.io/v1)"
    );
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
fn update_keeps_status_and_the_generation_it_had() {
    let old = prepare_create(&remote("v1.a.io", "a.io"), "uid-1", NOW).expect("create");
    let mut old = old;
    old["status"] = json!({"conditions": [{"type": "Available", "status": "True"}]});
    let mut body = old.clone();
    body["status"] = json!({});
    body["metadata"]["uid"] = json!("forged");
    // As kube-apiserver: a changed UID is refused (twice, as upstream validates it twice), a
    // missing one is the stored one.
    let err = prepare_update(&old, &body).expect_err("uid");
    assert_eq!(
        err.to_string(),
        "APIService.apiregistration.k8s.io \"v1.a.io\" is invalid: metadata.uid: Invalid value: \"forged\": field is immutable"
    );
    body["metadata"]
        .as_object_mut()
        .expect("meta")
        .remove("uid");
    let same = prepare_update(&old, &body).expect("update");
    assert_eq!(same["status"], old["status"]);
    assert_eq!(same["metadata"]["uid"], "uid-1");
    assert!(same["metadata"].get("generation").is_none());
    // A generation sent in the body is not taken: the stored one (none) stays.
    body["spec"]["versionPriority"] = json!(20);
    body["metadata"]["generation"] = json!(7);
    let changed = prepare_update(&old, &body).expect("update");
    assert!(changed["metadata"].get("generation").is_none(), "{changed}");
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
    let err = prepare_status_update(&old, &body).expect_err("Maybe");
    assert_eq!(
        err.to_string(),
        "APIService.apiregistration.k8s.io \"v1.a.io\" is invalid: status.conditions[0].status: Unsupported value: \"Maybe\": supported values: \"True\", \"False\", \"Unknown\""
    );
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

fn options(verb: Verb, manager: Option<&str>, force: Option<&str>) -> WriteOptions {
    WriteOptions::check(verb, manager, force, None, "kubectl/v1.32.0 (linux/amd64)")
        .expect("options")
}

#[test]
fn write_options_as_kube_apiserver_checks_them() {
    let apply = Verb::Patch(PatchKind::Apply);
    let err = WriteOptions::check(apply, None, None, None, "kubectl/v1.32").expect_err("required");
    assert_eq!(
        err.to_string(),
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    assert_eq!(err.details()["causes"][0]["reason"], "FieldValueRequired");
    let err = WriteOptions::check(Verb::Patch(PatchKind::Merge), None, Some("true"), None, "")
        .expect_err("forbidden");
    assert_eq!(
        err.to_string(),
        "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
    );
    let err = WriteOptions::check(Verb::Create, None, None, Some("Loud"), "").expect_err("value");
    assert!(err.to_string().starts_with(
        "CreateOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"Loud\""
    ));
    let defaulted = options(Verb::Update, None, None);
    assert_eq!(defaulted.manager, "kubectl");
    assert_eq!(defaulted.validation, FieldValidation::Warn);
    assert!(options(apply, Some("a"), Some("true")).force);
}

#[test]
fn writes_warn_about_unknown_fields_or_refuse_them_when_strict() {
    let mut body = remote("v1.a.io", "a.io");
    body["spec"]["foo"] = json!(1);
    let mut opts = options(Verb::Create, Some("m"), None);
    let created = create(&body, "uid-1", NOW, &opts).expect("create");
    assert_eq!(created.warnings, ["unknown field \"spec.foo\""]);
    assert!(created.object["spec"].get("foo").is_none());
    assert_eq!(
        created.object["metadata"]["managedFields"][0]["manager"],
        "m"
    );
    opts.validation = FieldValidation::Ignore;
    assert!(create(&body, "uid-1", NOW, &opts)
        .expect("create")
        .warnings
        .is_empty());
    opts.validation = FieldValidation::Strict;
    let err = update(&created.object, &body, Subresource::Main, NOW, &opts).expect_err("strict");
    assert_eq!(
        err.to_string(),
        "APIService in version \"v1\" cannot be handled as a APIService: strict decoding error: unknown field \"spec.foo\""
    );
}

const APPLIED: &[u8] = b"apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: v1.a.io\nspec:\n  group: a.io\n  version: v1\n  groupPriorityMinimum: 1000\n  versionPriority: 15\n  service: {namespace: ns, name: svc}\n";

#[test]
fn apply_creates_then_conflicts_and_keeps_the_strategy() {
    let a = options(Verb::Patch(PatchKind::Apply), Some("a"), None);
    let created = apply(
        None,
        APPLIED,
        "v1.a.io",
        "uid-1",
        Subresource::Main,
        NOW,
        &a,
    )
    .expect("create");
    let object = created.object;
    assert_eq!(object["metadata"]["uid"], "uid-1");
    assert_eq!(object["spec"]["service"]["port"], 443);
    assert_eq!(object["metadata"]["managedFields"][0]["operation"], "Apply");
    let changed = String::from_utf8_lossy(APPLIED).replace("15", "20");
    let b = options(Verb::Patch(PatchKind::Apply), Some("b"), None);
    let sub = Subresource::Main;
    let err = apply(
        Some(&object),
        changed.as_bytes(),
        "v1.a.io",
        "",
        sub,
        NOW,
        &b,
    )
    .expect_err("conflict");
    assert!(matches!(err, WriteError::Conflict(_)), "{err}");
    let forced = WriteOptions { force: true, ..b };
    let moved = apply(
        Some(&object),
        changed.as_bytes(),
        "v1.a.io",
        "",
        sub,
        NOW,
        &forced,
    )
    .expect("force");
    assert_eq!(moved.object["spec"]["versionPriority"], 20);
    assert!(moved.object["metadata"].get("generation").is_none());
    for (body, message) in [
        (
            &b"kind: APIService\nmetadata: {name: v1.a.io}\n"[..],
            "invalid object type: /, Kind=APIService",
        ),
        (
            &b"apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: x}\n"[..],
            "the name of the object (x) does not match the name on the URL (v1.a.io)",
        ),
    ] {
        let err = apply(Some(&object), body, "v1.a.io", "", sub, NOW, &a).expect_err("bad");
        assert_eq!(err.to_string(), message);
    }
}
