//! The writes of the table: creates (each a valid remote APIService changed by a merge patch),
//! then updates of [`UPDATED`].

use apiagg_tests::real_kube::RealKube;
use serde_json::{json, Value};

use super::Allowance;

/// The APIService both store for the update rows (kube-apiserver: registered, its Service at a
/// loopback port nothing listens on; apiagg: created through its API).
pub const UPDATED: &str = "v1.invalid-updates.example.com";

/// One write: what it shows, the method, the path after `apiservices` (empty for a create),
/// the query (besides kube-apiserver's `dryRun=All`) and the body.
pub struct Row {
    pub what: &'static str,
    pub method: &'static str,
    pub path: String,
    pub query: &'static str,
    pub body: Value,
    /// A PUT gets the current `resourceVersion` at each server (unless the body has one).
    pub versioned: bool,
    /// A difference written down, checked for its shape instead of equality.
    pub allowance: Option<Allowance>,
}

impl Row {
    /// The same row with `query`.
    fn query(self, query: &'static str) -> Row {
        Row { query, ..self }
    }

    /// The same row with `allowance`.
    fn allowing(self, allowance: Allowance) -> Row {
        let allowance = Some(allowance);
        Row { allowance, ..self }
    }

    /// `generateName` of a body without a name: the server names the object.
    pub fn generated_prefix(&self) -> Option<&str> {
        let meta = &self.body["metadata"];
        meta.get("name")
            .is_none()
            .then(|| meta["generateName"].as_str())
            .flatten()
    }
}

/// `base` with the JSON merge patch `patch` applied (RFC 7386: `null` removes).
pub fn with(mut base: Value, patch: Value) -> Value {
    merge(&mut base, patch);
    base
}

fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                if value.is_null() {
                    into.remove(&key);
                } else {
                    merge(into.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        (base, patch) => *base = patch,
    }
}

fn row(what: &'static str, method: &'static str, path: String, body: Value) -> Row {
    let versioned = method == "PUT";
    let (query, allowance) = ("", None);
    Row {
        what,
        method,
        path,
        query,
        body,
        versioned,
        allowance,
    }
}

/// A merge patch naming `<version>.<group>` with that group and version.
fn gv(version: &str, group: &str) -> Value {
    json!({"metadata": {"name": format!("{version}.{group}")},
        "spec": {"group": group, "version": version}})
}

fn meta(patch: Value) -> Value {
    json!({"metadata": patch})
}

fn spec(patch: Value) -> Value {
    json!({"spec": patch})
}

/// The creates: names, `generateName`, groups, versions, priorities, local and remote TLS
/// settings, the Service, the CA bundle's encoding, metadata, the body's kind and shape.
pub fn creates(kube: &RealKube) -> Vec<Row> {
    let valid = kube.apiservice("valid.example.com", "v1", "api", 8443);
    let local = json!({"service": null, "caBundle": null});
    let local = |more: Value| with(spec(local.clone()), spec(more));
    let (group, too_long) = (
        format!("{}.example.com", "a".repeat(241)),
        format!("{}.example.com", "a".repeat(242)),
    );
    let (v62, v63) = (
        format!("v{}", "1".repeat(62)),
        format!("v{}", "1".repeat(63)),
    );
    let big = "x".repeat(256 * 1024);
    let two_controllers = json!({"ownerReferences": [
        {"apiVersion": "v1", "kind": "K", "name": "a", "uid": "u1", "controller": true},
        {"apiVersion": "v1", "kind": "K", "name": "b", "uid": "u2", "controller": true}]});
    let owner = |reference: Value| meta(json!({"ownerReferences": [reference]}));
    let everything = json!({"metadata": {"name": "bad"}, "spec": {"group": "Bad_Group",
        "version": "V_1", "groupPriorityMinimum": 0, "versionPriority": 5000,
        "insecureSkipTLSVerify": true, "caBundle": "YWJj", "service": {"port": 0}}});
    #[rustfmt::skip]
    let table: Vec<(&'static str, Value)> = vec![
        ("valid remote (control)", json!({})),
        ("valid local (control)", local(json!({}))),
        ("insecureSkipTLSVerify without caBundle (control)",
            spec(json!({"caBundle": null, "insecureSkipTLSVerify": true}))),
        ("priorities at their maximum (control)",
            spec(json!({"groupPriorityMinimum": 20000, "versionPriority": 1000}))),
        ("name not <version>.<group>", meta(json!({"name": "wrong-name"}))),
        ("name of another group", meta(json!({"name": "v1.other.example.com"}))),
        ("name with a slash", meta(json!({"name": "v1/valid.example.com"}))),
        ("name with a percent sign", meta(json!({"name": "v1.valid%2Eexample.com"}))),
        ("name with a slash and a percent sign", meta(json!({"name": "v1/valid%2Eexample.com"}))),
        ("name ..", meta(json!({"name": ".."}))),
        ("name .", meta(json!({"name": "."}))),
        ("name with a tab", meta(json!({"name": "v1.valid\texample.com"}))),
        ("name missing", meta(json!({"name": null}))),
        ("name of 317 characters (control)", gv(&v62, &group)),
        ("generateName without a name",
            meta(json!({"name": null, "generateName": "v1.valid.example.com-"}))),
        ("generateName beside a valid name", meta(json!({"generateName": "gen-"}))),
        ("empty group, version v2", gv("v2", "")),
        ("version and group empty", gv("", "")),
        ("group with capitals", gv("v1", "Valid.Example.com")),
        ("group with an underscore", gv("v1", "in_valid.example.com")),
        ("group starting with a dash", gv("v1", "-valid.example.com")),
        ("group of 254 characters", gv("v1", &too_long)),
        ("group of 253 characters (control)", gv("v1", &group)),
        ("group too long and invalid", gv("v1", &format!("A{too_long}"))),
        ("version with capitals", gv("V1", "valid.example.com")),
        ("version starting with a digit", gv("1v", "valid.example.com")),
        ("version with a dot", gv("v1.2", "valid.example.com")),
        ("empty version", gv("", "valid.example.com")),
        ("version of 64 characters", gv(&v63, "valid.example.com")),
        ("version too long and invalid", gv(&format!("V{v63}"), "valid.example.com")),
        ("groupPriorityMinimum 0", spec(json!({"groupPriorityMinimum": 0}))),
        ("groupPriorityMinimum -1", spec(json!({"groupPriorityMinimum": -1}))),
        ("groupPriorityMinimum 20001", spec(json!({"groupPriorityMinimum": 20001}))),
        ("groupPriorityMinimum missing", spec(json!({"groupPriorityMinimum": null}))),
        ("versionPriority 0", spec(json!({"versionPriority": 0}))),
        ("versionPriority 1001", spec(json!({"versionPriority": 1001}))),
        ("versionPriority missing", spec(json!({"versionPriority": null}))),
        ("local with a caBundle", local(json!({"caBundle": "YWJj"}))),
        ("local with insecureSkipTLSVerify", local(json!({"insecureSkipTLSVerify": true}))),
        ("local with both", local(json!({"caBundle": "YWJj", "insecureSkipTLSVerify": true}))),
        ("insecureSkipTLSVerify with a caBundle", spec(json!({"insecureSkipTLSVerify": true}))),
        ("service namespace empty", spec(json!({"service": {"namespace": ""}}))),
        ("service name empty", spec(json!({"service": {"name": ""}}))),
        ("service without namespace and name",
            spec(json!({"service": {"namespace": null, "name": null}}))),
        ("service port 0", spec(json!({"service": {"port": 0}}))),
        ("service port 70000", spec(json!({"service": {"port": 70000}}))),
        ("service port -1", spec(json!({"service": {"port": -1}}))),
        ("service port missing (control: 443)", spec(json!({"service": {"port": null}}))),
        ("everything wrong at once", everything),
        ("no spec", json!({"spec": null})),
        ("status sent (control: ignored)",
            json!({"status": {"conditions": [{"type": "Available", "status": "Maybe"}]}})),
        ("caBundle not PEM (control)", spec(json!({"caBundle": "bm90IGEgY2VydGlmaWNhdGU="}))),
        ("caBundle not base64", spec(json!({"caBundle": "not base64!"}))),
        ("caBundle with line breaks (control)", spec(json!({"caBundle": "YWJj\nZGVm\r\n"}))),
        ("caBundle with bits after its last byte (control)", spec(json!({"caBundle": "YWJ="}))),
        ("caBundle without padding", spec(json!({"caBundle": "YWJ"}))),
        ("caBundle with one padding character", spec(json!({"caBundle": "YQ="}))),
        ("caBundle with data after the padding", spec(json!({"caBundle": "YQ==YQ=="}))),
        ("a namespace (control: dropped)", meta(json!({"namespace": "default"}))),
        ("generation -1", meta(json!({"generation": -1}))),
        ("label key with a space", meta(json!({"labels": {"bad key": "x"}}))),
        ("label key with an invalid prefix", meta(json!({"labels": {"Bad_Prefix/name": "x"}}))),
        ("label key with two slashes", meta(json!({"labels": {"a/b/c": "x"}}))),
        ("label key with an empty prefix", meta(json!({"labels": {"/name": "x"}}))),
        ("label key with an empty name", meta(json!({"labels": {"example.com/": "x"}}))),
        ("label key of 64 characters", meta(json!({"labels": {"k".repeat(64): "x"}}))),
        ("label value with a space", meta(json!({"labels": {"key": "bad value"}}))),
        ("label value of 64 characters", meta(json!({"labels": {"k": "v".repeat(64)}}))),
        ("annotation key with a space", meta(json!({"annotations": {"bad key": "x"}}))),
        ("annotation key with capitals (control)",
            meta(json!({"annotations": {"Example.com/Key": "x"}}))),
        ("annotation key with an invalid prefix",
            meta(json!({"annotations": {"Bad_Prefix/x": "x"}}))),
        ("annotation key with two slashes", meta(json!({"annotations": {"a/b/c": "x"}}))),
        ("annotation key of 64 characters", meta(json!({"annotations": {"k".repeat(64): "x"}}))),
        ("annotations over 256 KiB", meta(json!({"annotations": {"big": big}}))),
        ("finalizer not qualified (control)", meta(json!({"finalizers": ["bad"]}))),
        ("finalizer with a space", meta(json!({"finalizers": ["bad finalizer"]}))),
        ("finalizer with two slashes", meta(json!({"finalizers": ["a/b/c"]}))),
        ("finalizer of 64 characters", meta(json!({"finalizers": ["f".repeat(64)]}))),
        ("finalizers orphan and foregroundDeletion",
            meta(json!({"finalizers": ["orphan", "foregroundDeletion"]}))),
        ("ownerReference without fields", owner(json!({}))),
        ("ownerReference with empty fields",
            owner(json!({"apiVersion": "", "kind": "", "name": "", "uid": ""}))),
        ("ownerReference with a group and no version",
            owner(json!({"apiVersion": "apps/", "kind": "K", "name": "n", "uid": "u"}))),
        ("ownerReference apiVersion with two slashes",
            owner(json!({"apiVersion": "a/b/c", "kind": "K", "name": "n", "uid": "u"}))),
        ("ownerReference to an Event",
            owner(json!({"apiVersion": "v1", "kind": "Event", "name": "n", "uid": "u"}))),
        ("two controller ownerReferences", meta(two_controllers)),
        ("managedFields of a manager only (control)",
            meta(json!({"managedFields": [{"manager": "m"}]}))),
        ("no kind and apiVersion (control)", json!({"kind": null, "apiVersion": null})),
        ("wrong kind", json!({"kind": "Service"})),
        ("wrong apiVersion", json!({"apiVersion": "apiregistration.k8s.io/v1beta1"})),
        ("kind Service of v1", json!({"kind": "Service", "apiVersion": "v1"})),
        ("wrong kind and apiVersion", json!({"kind": "Foo", "apiVersion": "v1"})),
        ("built-in group apps (its v1 exists)", gv("v1", "apps")),
        ("core group, v1 (it exists)", gv("v1", "")),
    ];
    let mut rows: Vec<Row> = table
        .into_iter()
        .map(|(what, patch)| row(what, "POST", String::new(), with(valid.clone(), patch)))
        .collect();
    let post = |what, patch| row(what, "POST", String::new(), with(valid.clone(), patch));
    rows.extend([
        post("unknown field, Strict", spec(json!({"foo": 1}))).query("fieldValidation=Strict"),
        post(
            "groupPriorityMinimum a string",
            spec(json!({"groupPriorityMinimum": "100"})),
        )
        .allowing(Allowance::DecoderWords),
        post("spec a list", json!({"spec": [1]})).allowing(Allowance::DecoderWords),
        post("built-in group apps, a version it lacks", gv("v9", "apps"))
            .allowing(Allowance::BuiltinGroup),
    ]);
    rows
}

/// The updates of [`UPDATED`] (`stored`: as both store it): PUT, merge PATCH, PUT of `/status`.
pub fn updates(stored: &Value) -> Vec<Row> {
    let path = |sub: &str| format!("/{UPDATED}{sub}");
    let put = |what, patch| row(what, "PUT", path(""), with(stored.clone(), patch));
    let patch = |what, patch| row(what, "PATCH", path(""), patch);
    let forged = json!({"status": {"conditions": [{"type": "Available", "status": "True",
        "reason": "Forged", "message": "forged", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}});
    let maybe = json!({"status": {"conditions": [{"type": "Available", "status": "Maybe",
        "reason": "R", "message": "m", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}});
    let uid = json!({"metadata": {"uid": "6c1b4b8e-0000-4000-8000-000000000000"}});
    let other_name = json!({"metadata": {"name": "v2.invalid-updates.example.com"}});
    vec![
        put(
            "versionPriority changed (control)",
            spec(json!({"versionPriority": 300})),
        ),
        put(
            "status changed through the main resource (control: kept)",
            forged,
        ),
        put(
            "generation -1 (control: the stored one)",
            meta(json!({"generation": -1})),
        ),
        put("group changed", spec(json!({"group": "other.example.com"}))),
        put("versionPriority 0", spec(json!({"versionPriority": 0}))),
        put(
            "Service removed (local with a caBundle)",
            spec(json!({"service": null})),
        ),
        put("name in the body differs", other_name),
        put("without a name", meta(json!({"name": null}))),
        put("uid changed", uid.clone()),
        Row {
            versioned: false,
            ..put("without resourceVersion", json!({}))
        },
        put(
            "stale resourceVersion, versionPriority 0",
            json!({"metadata": {"resourceVersion": "1"}, "spec": {"versionPriority": 0}}),
        ),
        put(
            "resourceVersion not a number",
            meta(json!({"resourceVersion": "abc"})),
        )
        .allowing(Allowance::UnparsableResourceVersion),
        put("with generateName", meta(json!({"generateName": "gen-"}))),
        put("label invalid", meta(json!({"labels": {"bad key": "x"}}))),
        put(
            "finalizer and annotation invalid",
            meta(json!({"finalizers": ["a b"], "annotations": {"a b": "x"}})),
        ),
        patch(
            "groupPriorityMinimum 0",
            spec(json!({"groupPriorityMinimum": 0})),
        ),
        patch("version changed", spec(json!({"version": "v2"}))),
        patch("port 70000", spec(json!({"service": {"port": 70000}}))),
        patch("uid changed", uid),
        patch("unknown field, Strict", spec(json!({"foo": 1}))).query("fieldValidation=Strict"),
        row(
            "condition status Maybe",
            "PUT",
            path("/status"),
            with(stored.clone(), maybe),
        ),
    ]
}
