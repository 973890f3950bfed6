//! Server-side apply and field ownership on the APIService API, driven by the real kubectl:
//! conflicts between appliers worded as kube-apiserver words them, `--force-conflicts`, fields
//! dropped from a configuration removed only when nobody else owns them, `managedFields` after
//! create/edit/patch/client-side apply, and `fieldValidation=Warn` warnings.

use std::path::{Path, PathBuf};

use apiagg_tests::{client, json_of, Apiagg};
use serde_json::{json, Value};

const API: &str = "/apis/apiregistration.k8s.io/v1/apiservices";
const NAME: &str = "v1.ssa.example.com";

/// An APIService manifest with these labels (`{}` for none) and, if any, versionPriority.
fn manifest(labels: &str, version_priority: Option<u32>, extra_spec: &str) -> String {
    let priority = version_priority.map_or(String::new(), |p| format!("  versionPriority: {p}\n"));
    format!(
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata:\n  name: {NAME}\n  labels: {labels}\n\
         spec:\n  group: ssa.example.com\n  version: v1\n  groupPriorityMinimum: 1000\n{priority}\
         \x20 service: {{namespace: test, name: ssa}}\n{extra_spec}"
    )
}

fn write(gw: &Apiagg, file: &str, text: &str) -> PathBuf {
    let path = gw.dir.path().join(file);
    std::fs::write(&path, text).expect("manifest");
    path
}

fn kubectl(gw: &Apiagg, args: &[&str]) -> (bool, String, String) {
    apiagg_tests::kubectl("kubectl", gw.port, args)
}

fn kubectl_ok(gw: &Apiagg, args: &[&str]) -> String {
    let (ok, stdout, stderr) = kubectl(gw, args);
    assert!(ok, "kubectl {args:?}: {stderr}\n{stdout}");
    stdout
}

/// `kubectl apply --server-side` of `file` as `manager`, with more flags.
fn apply(gw: &Apiagg, manager: &str, file: &Path, flags: &[&str]) -> (bool, String, String) {
    let mut args = vec![
        "apply",
        "--server-side",
        "--field-manager",
        manager,
        "-f",
        file.to_str().expect("utf8"),
    ];
    args.extend_from_slice(flags);
    kubectl(gw, &args)
}

/// The object as kubectl shows it with its managed fields.
fn shown(gw: &Apiagg) -> Value {
    let out = kubectl_ok(
        gw,
        &[
            "get",
            "apiservice",
            NAME,
            "-o",
            "json",
            "--show-managed-fields",
        ],
    );
    serde_json::from_str(&out).expect("kubectl JSON")
}

fn entry<'a>(object: &'a Value, manager: &str) -> &'a Value {
    object["metadata"]["managedFields"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["manager"] == manager))
        .unwrap_or_else(|| panic!("no managedFields entry for {manager}: {object:#}"))
}

fn owns(object: &Value, manager: &str, field: &str) -> bool {
    entry(object, manager)["fieldsV1"]["f:spec"]
        .get(field)
        .is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appliers_conflict_force_and_drop_only_what_they_alone_own() {
    let gw = Apiagg::start("", &[]);
    gw.wait_ready().await;
    let a = write(&gw, "a.yaml", &manifest("{team: a, tier: x}", Some(15), ""));
    let (ok, _, stderr) = apply(&gw, "A", &a, &[]);
    assert!(ok, "{stderr}");

    // B changes versionPriority, which A owns: refused, naming the field; the label both set
    // to the same value is shared, not a conflict.
    let b = write(&gw, "b.yaml", &manifest("{tier: x}", Some(20), ""));
    let (ok, stdout, stderr) = apply(&gw, "B", &b, &[]);
    assert!(!ok, "a conflicting apply succeeded: {stdout}");
    assert!(
        stderr.contains("Apply failed with 1 conflict: conflict with \"A\": .spec.versionPriority"),
        "{stderr}"
    );
    // The Status as kube-apiserver sends it.
    let resp = client()
        .patch(gw.url(&format!("{API}/{NAME}?fieldManager=B")))
        .header("Content-Type", "application/apply-patch+yaml")
        .body(std::fs::read_to_string(&b).expect("b.yaml"))
        .send()
        .await
        .expect("apply");
    assert_eq!(resp.status().as_u16(), 409);
    let status = json_of(resp).await;
    assert_eq!(status["reason"], "Conflict", "{status}");
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason": "FieldManagerConflict", "message": "conflict with \"A\"",
            "field": ".spec.versionPriority"}]),
        "{status}"
    );

    let (ok, _, stderr) = apply(&gw, "B", &b, &["--force-conflicts"]);
    assert!(ok, "{stderr}");
    let object = shown(&gw);
    assert_eq!(object["spec"]["versionPriority"], 20);
    assert!(owns(&object, "B", "f:versionPriority"), "{object:#}");
    assert!(!owns(&object, "A", "f:versionPriority"), "{object:#}");
    assert_eq!(entry(&object, "B")["operation"], "Apply");

    // A applies again without the labels and versionPriority: its own label goes, the label
    // and the priority B owns stay.
    let a2 = write(&gw, "a2.yaml", &manifest("{}", None, ""));
    let (ok, _, stderr) = apply(&gw, "A", &a2, &[]);
    assert!(ok, "{stderr}");
    let object = shown(&gw);
    assert_eq!(
        object["metadata"]["labels"],
        json!({"tier": "x"}),
        "{object:#}"
    );
    assert_eq!(object["spec"]["versionPriority"], 20);
    assert!(!owns(&object, "A", "f:versionPriority"));

    let yaml = kubectl_ok(
        &gw,
        &[
            "get",
            "apiservice",
            NAME,
            "-o",
            "yaml",
            "--show-managed-fields",
        ],
    );
    for wanted in [
        "manager: A",
        "manager: B",
        "operation: Apply",
        "fieldsType: FieldsV1",
        "fieldsV1:",
        "f:versionPriority: {}",
        "apiVersion: apiregistration.k8s.io/v1",
    ] {
        assert!(yaml.contains(wanted), "{wanted} missing:\n{yaml}");
    }
    // Lists carry them too.
    let list = json_of(client().get(gw.url(API)).send().await.expect("list")).await;
    assert!(
        list["items"][0]["metadata"]["managedFields"].is_array(),
        "{list}"
    );
    // The availability controller's status writes are recorded as kube-apiserver's.
    let url = gw.url(&format!("{API}/{NAME}"));
    apiagg_tests::wait_until(
        "a status entry of kube-apiserver (the managed fields observed)",
        std::time::Duration::from_secs(5),
        || async {
            let object = json_of(client().get(&url).send().await.expect("get")).await;
            object["metadata"]["managedFields"].clone()
        },
        |fields| {
            fields.as_array().into_iter().flatten().any(|e| {
                e["manager"] == "kube-apiserver"
                    && e["operation"] == "Update"
                    && e["subresource"] == "status"
                    && e["fieldsV1"]["f:status"].is_object()
            })
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_are_owned_by_their_manager_and_unknown_fields_warn() {
    let gw = Apiagg::start("", &[]);
    gw.wait_ready().await;
    let file = write(&gw, "c.yaml", &manifest("{team: a}", Some(15), ""));
    let file = file.to_str().expect("utf8");
    kubectl_ok(&gw, &["create", "-f", file]);
    kubectl_ok(
        &gw,
        &[
            "patch",
            "apiservice",
            NAME,
            "--type=merge",
            "-p",
            r#"{"spec":{"versionPriority":30}}"#,
        ],
    );
    let object = shown(&gw);
    let create = entry(&object, "kubectl-create");
    assert_eq!(
        (
            &create["operation"],
            &create["apiVersion"],
            &create["fieldsType"]
        ),
        (
            &json!("Update"),
            &json!("apiregistration.k8s.io/v1"),
            &json!("FieldsV1")
        )
    );
    assert!(create["time"].is_string(), "{create}");
    assert!(owns(&object, "kubectl-patch", "f:versionPriority"));
    assert!(!owns(&object, "kubectl-create", "f:versionPriority"));

    // Client-side apply with a field APIService lacks: kubectl 1.27+ asks to be warned.
    let typo = write(
        &gw,
        "typo.yaml",
        &manifest("{team: a}", Some(15), "  foo: bar\n"),
    );
    let typo = typo.to_str().expect("utf8");
    let (ok, _, stderr) = kubectl(&gw, &["apply", "--validate=warn", "-f", typo]);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("Warning: unknown field \"spec.foo\""),
        "{stderr}"
    );
    let object = shown(&gw);
    assert!(owns(
        &object,
        "kubectl-client-side-apply",
        "f:versionPriority"
    ));
    assert!(object["spec"].get("foo").is_none());
    // The default (no fieldValidation) warns too; Ignore is silent.
    let mut body = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1.warn.example.com"},
        "spec": {"group": "warn.example.com", "version": "v1", "groupPriorityMinimum": 100,
            "versionPriority": 10, "foo": 1}});
    for (query, expected) in [
        ("", Some(r#"299 - "unknown field \"spec.foo\"""#)),
        ("?fieldValidation=Ignore", None),
    ] {
        let resp = client()
            .post(gw.url(&format!("{API}{query}")))
            .json(&body)
            .send()
            .await
            .expect("create");
        assert_eq!(resp.status().as_u16(), 201);
        let warning = resp
            .headers()
            .get("warning")
            .map(|v| v.to_str().expect("ascii"));
        assert_eq!(warning, expected);
        let name = body["metadata"]["name"].as_str().unwrap_or("").to_string();
        body["metadata"]["name"] = json!(name.replace("v1.", "v2."));
        body["spec"]["version"] = json!("v2");
    }
}
