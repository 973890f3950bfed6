use serde_json::{json, Value};

use super::*;

const T1: &str = "2026-11-23T20:00:00Z";
const T2: &str = "2026-11-23T20:05:00Z";

fn writer<'a>(manager: &'a str, now: &'a str) -> Writer<'a> {
    Writer {
        manager,
        subresource: Subresource::Main,
        now,
    }
}

fn object() -> Value {
    json!({"apiVersion": API_VERSION, "kind": "APIService",
        "metadata": {"name": "v1.a.io", "uid": "u", "resourceVersion": "7", "generation": 1,
            "creationTimestamp": T1, "labels": {"a": "b"}, "finalizers": ["x"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": "n", "uid": "o1"}]},
        "spec": {"group": "a.io", "version": "v1", "groupPriorityMinimum": 1000,
            "versionPriority": 15, "caBundle": "Y2E=",
            "service": {"namespace": "ns", "name": "svc", "port": 443}},
        "status": {"conditions": [{"type": "Available", "status": "True"}]}})
}

fn config(version_priority: i64) -> Value {
    json!({"apiVersion": API_VERSION, "kind": "APIService", "metadata": {"name": "v1.a.io"},
        "spec": {"group": "a.io", "version": "v1", "groupPriorityMinimum": 1000,
            "versionPriority": version_priority, "service": {"namespace": "ns", "name": "svc"}}})
}

fn entry<'a>(object: &'a Value, manager: &str) -> &'a Value {
    object["metadata"]["managedFields"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["manager"] == manager))
        .unwrap_or_else(|| panic!("no entry for {manager}: {object}"))
}

fn created(manager: &str) -> Value {
    let mut new = object();
    update(None, &mut new, None, &writer(manager, T1));
    new
}

#[test]
fn a_create_owns_every_field_it_sets_in_fields_v1() {
    let new = created("kubectl-create");
    assert_eq!(
        entry(&new, "kubectl-create"),
        &json!({"manager": "kubectl-create", "operation": "Update", "apiVersion": API_VERSION,
            "time": T1, "fieldsType": "FieldsV1", "fieldsV1": {
                "f:metadata": {
                    "f:finalizers": {".": {}, "v:\"x\"": {}},
                    "f:labels": {".": {}, "f:a": {}},
                    "f:ownerReferences": {".": {}, "k:{\"uid\":\"o1\"}": {".": {},
                        "f:apiVersion": {}, "f:kind": {}, "f:name": {}, "f:uid": {}}}},
                "f:spec": {"f:caBundle": {}, "f:group": {}, "f:groupPriorityMinimum": {},
                    "f:service": {".": {}, "f:name": {}, "f:namespace": {}, "f:port": {}},
                    "f:version": {}, "f:versionPriority": {}}}})
    );
    // Status and server-set metadata are nobody's.
    let fields = entry(&new, "kubectl-create")["fieldsV1"].to_string();
    for untracked in [
        "f:status",
        "f:resourceVersion",
        "f:generation",
        "f:creationTimestamp",
    ] {
        assert!(!fields.contains(untracked), "{fields}");
    }
    let metadata = &entry(&new, "kubectl-create")["fieldsV1"]["f:metadata"];
    assert!(metadata.get("f:name").is_none() && metadata.get("f:uid").is_none());
}

#[test]
fn fields_v1_reads_back_what_it_writes_and_names_paths_as_upstream() {
    let new = created("m");
    let raw = &entry(&new, "m")["fieldsV1"];
    let set = FieldSet::from_fields_v1(raw);
    assert_eq!(&set.to_fields_v1(), raw);
    let names: Vec<String> = set.paths().iter().map(|p| path_string(p)).collect();
    assert!(
        names.contains(&".spec.versionPriority".to_string()),
        "{names:?}"
    );
    assert!(names.contains(&".metadata.finalizers[=\"x\"]".to_string()));
    assert!(names.contains(&".metadata.ownerReferences[uid=\"o1\"].kind".to_string()));
    let mut conditions = FieldSet::new();
    conditions.insert(&[
        PathElement::Field("status".into()),
        PathElement::Field("conditions".into()),
        PathElement::key_of("type", &json!({"type": "Available"})).expect("key"),
        PathElement::Field("status".into()),
    ]);
    assert_eq!(
        conditions.to_fields_v1(),
        json!({"f:status": {"f:conditions": {"k:{\"type\":\"Available\"}": {"f:status": {}}}}})
    );
    assert_eq!(
        path_string(&conditions.paths()[0]),
        ".status.conditions[type=\"Available\"].status"
    );
}

#[test]
fn an_update_takes_changed_fields_from_other_managers() {
    let old = created("kubectl-create");
    let mut new = old.clone();
    new["spec"]["versionPriority"] = json!(20);
    new["metadata"]["labels"]["c"] = json!("d");
    new["metadata"]["finalizers"] = json!([]);
    update(Some(&old), &mut new, None, &writer("kubectl-edit", T2));
    let edit = &entry(&new, "kubectl-edit")["fieldsV1"];
    assert_eq!(
        edit,
        &json!({"f:metadata": {"f:labels": {"f:c": {}}}, "f:spec": {"f:versionPriority": {}}})
    );
    assert_eq!(entry(&new, "kubectl-edit")["time"], T2);
    let create = entry(&new, "kubectl-create");
    assert!(create["fieldsV1"]["f:spec"]
        .get("f:versionPriority")
        .is_none());
    // The removed finalizer left every set (the emptied list itself stays the creator's).
    assert_eq!(create["fieldsV1"]["f:metadata"]["f:finalizers"], json!({}));
    assert_eq!(create["time"], T1);
    // A write that changes nothing changes no entry.
    let mut same = new.clone();
    update(Some(&new), &mut same, None, &writer("other", T2));
    assert_eq!(
        same["metadata"]["managedFields"],
        new["metadata"]["managedFields"]
    );
}

#[test]
fn clients_may_reset_or_replace_the_history_but_not_through_status() {
    let old = created("kubectl-create");
    let mut new = old.clone();
    new["metadata"]["managedFields"] = json!([{}]);
    update(Some(&old), &mut new, Some(&json!([{}])), &writer("x", T2));
    assert!(new["metadata"].get("managedFields").is_none(), "{new}");
    let mut status = old.clone();
    status["status"]["conditions"][0]["status"] = json!("False");
    let status_writer = Writer {
        manager: "controller",
        subresource: Subresource::Status,
        now: T2,
    };
    update(Some(&old), &mut status, Some(&json!([])), &status_writer);
    let entry = entry(&status, "controller");
    assert_eq!(entry["subresource"], "status");
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:status": {"f:conditions": {"k:{\"type\":\"Available\"}": {"f:status": {}}}}})
    );
    assert!(entry_count(&status) == 2, "{status}");
}

fn entry_count(object: &Value) -> usize {
    object["metadata"]["managedFields"]
        .as_array()
        .map_or(0, Vec::len)
}

fn applied(live: Option<&Value>, manager: &str, config: &Value, force: bool) -> Value {
    apply(live, config, &writer(manager, T2), force).expect("apply")
}

#[test]
fn an_apply_owns_exactly_its_configuration() {
    let live = applied(None, "a", &config(15), false);
    let a = entry(&live, "a");
    assert_eq!(a["operation"], "Apply");
    assert_eq!(
        a["fieldsV1"],
        json!({"f:spec": {"f:group": {}, "f:groupPriorityMinimum": {},
            "f:service": {"f:name": {}, "f:namespace": {}}, "f:version": {}, "f:versionPriority": {}}})
    );
    assert_eq!(live["spec"]["versionPriority"], 15);
    assert_eq!(entry_count(&live), 1);
}

#[test]
fn conflicts_are_refused_with_upstreams_message_unless_forced() {
    let live = applied(None, "a", &config(15), false);
    let err = apply(Some(&live), &config(20), &writer("b", T2), false).expect_err("conflict");
    let ApplyError::Conflicts(conflicts) = err else {
        panic!("{err}");
    };
    assert_eq!(
        conflicts.to_string(),
        "Apply failed with 1 conflict: conflict with \"a\": .spec.versionPriority"
    );
    assert_eq!(
        conflicts.causes(),
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"a\"",
            "field": ".spec.versionPriority"}])
    );
    // An updater and an applier both in the way: grouped by manager.
    let mut edited = live.clone();
    edited["spec"]["groupPriorityMinimum"] = json!(2000);
    update(Some(&live), &mut edited, None, &writer("kubectl-edit", T2));
    let mut two = config(20);
    two["spec"]["groupPriorityMinimum"] = json!(3000);
    two["spec"]["group"] = json!("a.io");
    let err = apply(Some(&edited), &two, &writer("b", T2), false).expect_err("conflicts");
    assert_eq!(
        err.to_string(),
        "Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.versionPriority\n\
         conflicts with \"kubectl-edit\" using apiregistration.k8s.io/v1:\n- .spec.groupPriorityMinimum"
    );
    // Forced: the field moves.
    let forced = applied(Some(&live), "b", &config(20), true);
    assert_eq!(forced["spec"]["versionPriority"], 20);
    assert!(entry(&forced, "a")["fieldsV1"]["f:spec"]
        .get("f:versionPriority")
        .is_none());
    assert!(entry(&forced, "b")["fieldsV1"]["f:spec"]
        .get("f:versionPriority")
        .is_some());
    // The same value is no conflict: both own it.
    let shared = applied(Some(&live), "b", &config(15), false);
    assert!(entry(&shared, "a")["fieldsV1"]["f:spec"]
        .get("f:versionPriority")
        .is_some());
}

#[test]
fn fields_no_longer_applied_go_unless_someone_else_owns_them() {
    let mut with_ca = config(15);
    with_ca["spec"]["caBundle"] = json!("Y2E=");
    with_ca["metadata"]["labels"] = json!({"team": "x"});
    let live = applied(None, "a", &with_ca, false);
    // a alone owned caBundle and the label: both go.
    let dropped = applied(Some(&live), "a", &config(15), false);
    assert!(dropped["spec"].get("caBundle").is_none(), "{dropped}");
    assert!(dropped["metadata"].get("labels").is_none(), "{dropped}");
    assert_eq!(dropped["metadata"]["name"], "v1.a.io");
    // b applies the same caBundle: a dropping it keeps it.
    let mut b_config = config(15);
    b_config["spec"] = json!({"caBundle": "Y2E="});
    let shared = applied(Some(&live), "b", &b_config, false);
    let kept = applied(Some(&shared), "a", &config(15), false);
    assert_eq!(kept["spec"]["caBundle"], "Y2E=");
    assert!(kept["metadata"].get("labels").is_none());
    assert_eq!(
        entry(&kept, "b")["fieldsV1"],
        json!({"f:spec": {"f:caBundle": {}}})
    );
}

#[test]
fn applies_to_the_main_resource_never_own_status_and_status_applies_only_status() {
    let mut with_status = config(15);
    with_status["status"] = json!({"conditions": [{"type": "Available", "status": "False"}]});
    let live = applied(None, "a", &with_status, false);
    assert!(entry(&live, "a")["fieldsV1"].get("f:status").is_none());
    let status_writer = Writer {
        manager: "s",
        subresource: Subresource::Status,
        now: T2,
    };
    let merged = apply(Some(&live), &with_status, &status_writer, false).expect("status apply");
    assert_eq!(
        entry(&merged, "s")["fieldsV1"],
        json!({"f:status": {"f:conditions": {"k:{\"type\":\"Available\"}": {".": {},
            "f:status": {}, "f:type": {}}}}})
    );
    assert_eq!(entry(&merged, "s")["subresource"], "status");
}

#[test]
fn kubectl_takes_over_from_client_side_apply_but_others_conflict() {
    let mut body = object();
    let last = config(15).to_string();
    body["metadata"]["annotations"] = json!({LAST_APPLIED: last});
    let mut live = body.clone();
    update(
        None,
        &mut live,
        None,
        &writer("kubectl-client-side-apply", T1),
    );
    let err = apply(Some(&live), &config(20), &writer("other", T2), false).expect_err("conflict");
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using apiregistration.k8s.io/v1: .spec.versionPriority"
    );
    let upgraded = applied(Some(&live), "kubectl", &config(20), false);
    assert_eq!(upgraded["spec"]["versionPriority"], 20);
    let annotation = upgraded["metadata"]["annotations"][LAST_APPLIED]
        .as_str()
        .expect("annotation");
    assert!(
        annotation.contains("\"versionPriority\":20"),
        "{annotation}"
    );
}

#[test]
fn bad_configurations_and_manager_names() {
    let mut bad = config(15);
    bad["metadata"]["managedFields"] = json!([]);
    assert!(matches!(
        apply(None, &bad, &writer("a", T1), false),
        Err(ApplyError::BadRequest(_))
    ));
    assert_eq!(
        manager_from_user_agent("kubectl/v1.32.0 (linux/amd64)"),
        "kubectl"
    );
    assert_eq!(manager_from_user_agent(&"x".repeat(300)).len(), 128);
    assert_eq!(manager_from_user_agent(""), "");
}

#[test]
fn entries_are_sorted_apply_first_then_by_time() {
    let live = applied(None, "z", &config(15), false);
    let mut new = live.clone();
    new["metadata"]["labels"] = json!({"k": "v"});
    update(Some(&live), &mut new, None, &writer("a", T2));
    let managers: Vec<&str> = new["metadata"]["managedFields"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|e| e["manager"].as_str())
        .collect();
    assert_eq!(managers, ["z", "a"]);
}
