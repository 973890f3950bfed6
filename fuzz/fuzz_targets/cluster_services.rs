//! Services and EndpointSlices the delegate lists and watches (`gateway/src/controllers/
//! services.rs`), through `ClusterServices` (`replace_services`, `replace_slices`,
//! `service_event`, `slice_event`) and `resolve` in every mode; each resolved endpoint's URL
//! must parse back to the same endpoint (`parse_endpoint`).
//!
//! Input: one JSON value: a list's `items` array (read as Services and as EndpointSlices), or
//! one watched object (read as both kinds, added then deleted).
#![no_main]

use apiagg_config::{object_key, parse_endpoint, ClusterServices, ServiceResolution};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fn resolve_all(cluster: &ClusterServices, objects: &[Value]) {
    for object in objects.iter().take(8) {
        let Some((namespace, name)) = object_key(object) else {
            continue;
        };
        // The Service's own name, and the one an EndpointSlice names in its label.
        let service = object["metadata"]["labels"]["kubernetes.io/service-name"]
            .as_str()
            .unwrap_or(&name)
            .to_string();
        let ports: Vec<i32> = object["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["port"].as_i64().and_then(|p| i32::try_from(p).ok()))
            .chain([443])
            .take(4)
            .collect();
        for mode in [
            ServiceResolution::Config,
            ServiceResolution::Cluster,
            ServiceResolution::Endpoints,
        ] {
            for port in &ports {
                for who in [&name, &service] {
                    if let Ok(endpoints) = cluster.resolve(mode, &namespace, who, *port) {
                        for endpoint in endpoints.iter().take(16) {
                            assert_eq!(parse_endpoint(&endpoint.url).as_ref(), Ok(endpoint));
                        }
                    }
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let mut cluster = ClusterServices::default();
    let _ = cluster.resolve(ServiceResolution::Cluster, "ns", "svc", 443);
    let objects: Vec<Value> = match value {
        Value::Array(items) => {
            cluster.replace_services(&items);
            cluster.replace_slices(&items);
            items
        }
        object => {
            cluster.service_event(&object, false);
            cluster.slice_event(&object, false);
            vec![object]
        }
    };
    cluster.mark_listed();
    resolve_all(&cluster, &objects);
    // Watch events on top of the list: modified again, then deleted.
    for object in objects.iter().take(8) {
        cluster.service_event(object, false);
        cluster.slice_event(object, false);
    }
    resolve_all(&cluster, &objects);
    for object in objects.iter().take(8) {
        cluster.service_event(object, true);
        cluster.slice_event(object, true);
    }
    let _ = cluster.set_problem(Some("watch failed".into()));
    resolve_all(&cluster, &objects);
    assert!(cluster.settled());
});
