//! Writes through the APIService API as `gateway/src/apiservices/writes.rs` does them, on a
//! stored APIService that two managers own fields of: create and update bodies
//! (`strategy::create` / `update`: `decode`, the strategy, unknown-field warnings and
//! `metadata.managedFields` read from the body), the four PATCH kinds kubectl sends
//! (`apply_patch` then `update`; server-side apply through `strategy::apply` with field
//! ownership, conflicts and `force`), apply creating the object, and the request options
//! (`WriteOptions::check`, `PatchKind::from_content_type`).
//!
//! Input: one byte choosing the operation (low 3 bits), `/status` (0x80), `force=true` (0x40)
//! and `fieldValidation` Strict (0x20) or Ignore (0x10); then the request body. For the options
//! operation the body is `fieldManager`, `force`, `fieldValidation`, User-Agent and Content-Type
//! separated by NUL bytes.
#![no_main]

use std::sync::OnceLock;

use apiagg_strategy::managed_fields::Subresource;
use apiagg_strategy::{self as strategy, PatchKind, Verb, WriteOptions};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

const NOW: &str = "2025-01-01T00:00:00Z";
const NAME: &str = "v1beta1.metrics.k8s.io";

fn options(verb: Verb, manager: &str, force: bool, validation: Option<&str>) -> WriteOptions {
    WriteOptions::check(
        verb,
        Some(manager),
        force.then_some("true"),
        validation,
        "kubectl/v1.32.0 (linux/amd64) kubernetes/abcdef",
    )
    .expect("valid options")
}

/// The stored object: applied by kubectl, `versionPriority` then updated by a controller, and
/// a status written by the availability controller; so `managedFields` has three entries.
fn stored() -> &'static Value {
    static STORED: OnceLock<Value> = OnceLock::new();
    STORED.get_or_init(|| {
        let applied = b"apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta1.metrics.k8s.io
  labels: {k8s-app: metrics-server}
spec:
  group: metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  insecureSkipTLSVerify: true
  service: {namespace: kube-system, name: metrics-server, port: 443}
";
        let apply = options(Verb::Patch(PatchKind::Apply), "kubectl", false, None);
        let created = strategy::apply(None, applied, NAME, "uid-1", Subresource::Main, NOW, &apply)
            .expect("apply creates")
            .object;
        let mut body = created.clone();
        body["spec"]["versionPriority"] = json!(50);
        let controller = options(Verb::Update, "controller", false, None);
        let updated = strategy::update(&created, &body, Subresource::Main, NOW, &controller)
            .expect("update")
            .object;
        let mut body = updated.clone();
        body["status"] = json!({"conditions": [
            strategy::condition("False", "FailedDiscoveryCheck", "no response", NOW)]});
        let availability = options(Verb::Update, "apiagg-availability", false, None);
        strategy::update(&updated, &body, Subresource::Status, NOW, &availability)
            .expect("status update")
            .object
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&op, body)) = data.split_first() else {
        return;
    };
    let sub = if op & 0x80 != 0 {
        Subresource::Status
    } else {
        Subresource::Main
    };
    let force = op & 0x40 != 0;
    let validation = match op & 0x30 {
        0x20 => Some("Strict"),
        0x10 => Some("Ignore"),
        _ => None,
    };
    let old = stored();
    let patch_kinds = [
        PatchKind::Json,
        PatchKind::Merge,
        PatchKind::Strategic,
        PatchKind::Apply,
    ];
    match op & 0x07 {
        // POST and PUT: a JSON body.
        op @ (0 | 1) => {
            let Ok(value) = serde_json::from_slice::<Value>(body) else {
                return;
            };
            let _ = strategy::decode(&value);
            if op == 0 {
                let options = options(Verb::Create, "fuzz", false, validation);
                let _ = strategy::create(&value, "uid-2", NOW, &options);
            } else {
                let options = options(Verb::Update, "fuzz", false, validation);
                let _ = strategy::update(old, &value, sub, NOW, &options);
            }
        }
        // PATCH with each content type kubectl sends.
        op @ 2..=5 => {
            let kind = patch_kinds[usize::from(op - 2)];
            let force = force && kind == PatchKind::Apply;
            let options = options(Verb::Patch(kind), "fuzz", force, validation);
            let _ = if kind == PatchKind::Apply {
                strategy::apply(Some(old), body, NAME, "", sub, NOW, &options)
            } else {
                strategy::apply_patch(old, kind, body)
                    .and_then(|patched| strategy::update_patched(old, &patched, sub, NOW, &options))
            };
        }
        // Server-side apply creating the object.
        6 => {
            let options = options(Verb::Patch(PatchKind::Apply), "fuzz", force, validation);
            let _ = strategy::apply(None, body, NAME, "uid-3", Subresource::Main, NOW, &options);
        }
        // The request options and the Content-Type of a PATCH.
        _ => {
            let text = String::from_utf8_lossy(body);
            let mut parts = text.split('\0');
            let mut next = || parts.next();
            let (manager, force, validation, agent, content_type) =
                (next(), next(), next(), next(), next());
            let kind = PatchKind::from_content_type(content_type.unwrap_or(""));
            let verb = kind.map_or(Verb::Update, Verb::Patch);
            let _ = WriteOptions::check(verb, manager, force, validation, agent.unwrap_or(""));
        }
    }
});
