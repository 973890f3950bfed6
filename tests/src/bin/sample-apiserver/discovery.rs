//! Discovery documents: the generated group, legacy → aggregated conversion and
//! Accept negotiation for aggregated discovery (`APIGroupDiscoveryList`).

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::{json, Value};

use crate::args::{Args, DiscoveryMode};
use crate::fixtures::Fixtures;

pub const VERBS: [&str; 5] = ["create", "delete", "get", "list", "watch"];

/// Aggregated discovery formats a client can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregated {
    V2,
    V2beta1,
}

impl Aggregated {
    pub fn content_type(self) -> &'static str {
        match self {
            Aggregated::V2 => {
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            }
            Aggregated::V2beta1 => {
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
            }
        }
    }
}

/// What an Accept header allows for `/api` and `/apis`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// Preferred aggregated format, if any is acceptable (v2 wins over v2beta1).
    pub aggregated: Option<Aggregated>,
    /// Whether aggregated v2beta1 is acceptable (even when v2 is preferred).
    pub v2beta1: bool,
    /// Whether plain legacy JSON is acceptable.
    pub legacy: bool,
}

impl Negotiated {
    /// The aggregated format a server speaking `mode` answers with, if any.
    pub fn aggregated_for(self, mode: DiscoveryMode) -> Option<Aggregated> {
        match mode {
            DiscoveryMode::V2 => self.aggregated,
            DiscoveryMode::V2beta1 => self.v2beta1.then_some(Aggregated::V2beta1),
            DiscoveryMode::Legacy => None,
        }
    }
}

/// Reads an Accept header (absent means "anything").
pub fn negotiate(accept: Option<&str>) -> Negotiated {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Negotiated {
            aggregated: None,
            v2beta1: false,
            legacy: true,
        };
    };
    let (mut v2, mut v2beta1, mut legacy) = (false, false, false);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let params: HashMap<String, String> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        if params
            .get("q")
            .is_some_and(|q| q.parse::<f32>().is_ok_and(|q| q <= 0.0))
        {
            continue;
        }
        let json_like = matches!(media.as_str(), "application/json" | "application/*" | "*/*");
        match params.get("as").map(String::as_str) {
            Some("APIGroupDiscoveryList") if json_like => {
                let group_ok = params.get("g").is_none_or(|g| g == "apidiscovery.k8s.io");
                match params.get("v").map(String::as_str) {
                    Some("v2") if group_ok => v2 = true,
                    Some("v2beta1") if group_ok => v2beta1 = true,
                    _ => {}
                }
            }
            None if json_like => legacy = true,
            _ => {}
        }
    }
    let aggregated = if v2 {
        Some(Aggregated::V2)
    } else if v2beta1 {
        Some(Aggregated::V2beta1)
    } else {
        None
    };
    Negotiated {
        aggregated,
        v2beta1,
        legacy,
    }
}

/// An aggregated document pre-rendered in both versions.
#[derive(Debug, Clone)]
pub struct AggregatedDoc {
    v2: Bytes,
    v2beta1: Bytes,
}

impl AggregatedDoc {
    /// Renders `doc` (an `apidiscovery.k8s.io/v2` list) in v2 and v2beta1.
    pub fn new(mut doc: Value) -> Self {
        doc["apiVersion"] = json!("apidiscovery.k8s.io/v2");
        let v2 = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
        doc["apiVersion"] = json!("apidiscovery.k8s.io/v2beta1");
        let v2beta1 = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
        AggregatedDoc { v2, v2beta1 }
    }

    pub fn get(&self, format: Aggregated) -> Bytes {
        match format {
            Aggregated::V2 => self.v2.clone(),
            Aggregated::V2beta1 => self.v2beta1.clone(),
        }
    }
}

/// Every discovery document the server answers, rendered once at start.
pub struct Discovery {
    /// Legacy documents of the generated group (`/apis`, `/apis/<g>`, `/apis/<g>/<v>`).
    pub generated: HashMap<String, Bytes>,
    /// Aggregated `/apis`: the fixture's `aggregated_v2.json`, else the generated group.
    pub apis: AggregatedDoc,
    /// Aggregated `/api`: converted from the fixture's `api__v1.json`, if present.
    pub api: Option<AggregatedDoc>,
    /// Which aggregated formats `/api` and `/apis` answer (`--discovery`).
    pub mode: DiscoveryMode,
}

impl Discovery {
    pub fn new(args: &Args, fixtures: &Fixtures) -> Self {
        let (g, v) = (&args.group, &args.version);
        let gv = format!("{g}/{v}");
        let group = json!({
            "name": g,
            "versions": [{"groupVersion": gv, "version": v}],
            "preferredVersion": {"groupVersion": gv, "version": v},
        });
        let mut api_group = json!({"kind": "APIGroup", "apiVersion": "v1"});
        merge(&mut api_group, &group);
        let resource_list = json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv,
            "resources": [{
                "name": args.resource,
                "singularName": args.kind.to_ascii_lowercase(),
                "namespaced": args.namespaced,
                "kind": args.kind,
                "verbs": VERBS,
            }],
        });
        let group_list = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]});

        let render = |v: &Value| Bytes::from(serde_json::to_vec(v).unwrap_or_default());
        let generated = HashMap::from([
            ("/apis".to_string(), render(&group_list)),
            (format!("/apis/{g}"), render(&api_group)),
            (format!("/apis/{g}/{v}"), render(&resource_list)),
        ]);
        let apis = match &fixtures.aggregated {
            Some(doc) => AggregatedDoc::new(doc.clone()),
            None => AggregatedDoc::new(list(vec![group_item(g, &[&resource_list])])),
        };
        let api = fixtures
            .legacy_json("/api/v1")
            .map(|core| AggregatedDoc::new(list(vec![group_item("", &[&core])])));
        Discovery {
            generated,
            apis,
            api,
            mode: args.discovery,
        }
    }
}

fn merge(target: &mut Value, extra: &Value) {
    if let (Some(t), Some(e)) = (target.as_object_mut(), extra.as_object()) {
        t.extend(e.clone());
    }
}

fn list(items: Vec<Value>) -> Value {
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// One `APIGroupDiscovery` from legacy `APIResourceList`s (newest version first).
fn group_item(group: &str, versions: &[&Value]) -> Value {
    let versions: Vec<Value> = versions.iter().map(|l| version_item(group, l)).collect();
    json!({"metadata": {"name": group}, "versions": versions})
}

/// Converts one legacy `APIResourceList` to an `APIVersionDiscovery`.
fn version_item(group: &str, list: &Value) -> Value {
    let version = list["groupVersion"]
        .as_str()
        .and_then(|gv| gv.rsplit('/').next())
        .unwrap_or_default()
        .to_string();
    let empty = Vec::new();
    let resources = list["resources"].as_array().unwrap_or(&empty);
    let kind_of = |r: &Value| {
        json!({
            "group": r.get("group").and_then(Value::as_str).unwrap_or(group),
            "version": r.get("version").and_then(Value::as_str).unwrap_or(&version),
            "kind": r["kind"],
        })
    };
    let mut out: Vec<Value> = Vec::new();
    for r in resources.iter().filter(|r| !name(r).contains('/')) {
        let mut item = json!({
            "resource": name(r),
            "responseKind": kind_of(r),
            "scope": if r["namespaced"].as_bool().unwrap_or(false) { "Namespaced" } else { "Cluster" },
            "singularResource": r["singularName"],
            "verbs": r["verbs"],
        });
        for key in ["shortNames", "categories"] {
            if let Some(v) = r.get(key) {
                item[key] = v.clone();
            }
        }
        let subresources: Vec<Value> = resources
            .iter()
            .filter_map(|s| {
                let (parent, sub) = name(s).split_once('/')?;
                (parent == name(r)).then(
                    || json!({"subresource": sub, "responseKind": kind_of(s), "verbs": s["verbs"]}),
                )
            })
            .collect();
        if !subresources.is_empty() {
            item["subresources"] = Value::Array(subresources);
        }
        out.push(item);
    }
    json!({"version": version, "resources": out, "freshness": "Current"})
}

fn name(resource: &Value) -> &str {
    resource["name"].as_str().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_accept_prefers_v2() {
        let n = negotiate(Some(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
        ));
        assert_eq!(n.aggregated, Some(Aggregated::V2));
        assert!(n.legacy);
        assert_eq!(
            n.aggregated_for(DiscoveryMode::V2beta1),
            Some(Aggregated::V2beta1)
        );
        assert_eq!(n.aggregated_for(DiscoveryMode::Legacy), None);
    }

    #[test]
    fn v2beta1_server_never_answers_v2() {
        let n = negotiate(Some(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        ));
        assert_eq!(n.aggregated_for(DiscoveryMode::V2), Some(Aggregated::V2));
        assert_eq!(n.aggregated_for(DiscoveryMode::V2beta1), None);
        assert!(n.legacy);
    }

    #[test]
    fn v2beta1_only_and_plain() {
        let n = negotiate(Some(
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
        ));
        assert_eq!(n.aggregated, Some(Aggregated::V2beta1));
        assert!(!n.legacy);
        assert_eq!(negotiate(None).aggregated, None);
        assert!(negotiate(Some("*/*")).legacy);
    }
}
