use serde_json::json;

use super::*;

fn urls(endpoints: Vec<Endpoint>) -> Vec<String> {
    endpoints.into_iter().map(|e| e.url).collect()
}

fn service(ns: &str, name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"namespace": ns, "name": name, "resourceVersion": "1"}, "spec": spec})
}

fn slice(
    ns: &str,
    name: &str,
    service: &str,
    port: i32,
    endpoints: serde_json::Value,
) -> serde_json::Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"namespace": ns, "name": name, "labels": {SERVICE_NAME_LABEL: service}},
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        "endpoints": endpoints})
}

fn listed(services: &[serde_json::Value], slices: &[serde_json::Value]) -> ClusterServices {
    let mut cluster = ClusterServices::default();
    cluster.replace_services(services);
    cluster.replace_slices(slices);
    cluster.mark_listed();
    cluster
}

const MODE: ServiceResolution = ServiceResolution::Endpoints;

#[test]
fn cluster_ip_and_its_failures() {
    let cluster = listed(
        &[
            service(
                "m",
                "api",
                json!({"clusterIP": "10.0.0.7", "ports": [{"name": "https", "port": 443}]}),
            ),
            service(
                "m",
                "v6",
                json!({"clusterIP": "fd00::7", "ports": [{"port": 443}]}),
            ),
            service(
                "m",
                "headless",
                json!({"clusterIP": "None", "ports": [{"port": 443}]}),
            ),
            service(
                "m",
                "ext",
                json!({"type": "ExternalName", "externalName": "api.example.com"}),
            ),
        ],
        &[],
    );
    let mode = ServiceResolution::Cluster;
    assert_eq!(
        cluster.resolve(mode, "m", "api", 443).map(urls),
        Ok(vec!["https://10.0.0.7:443".to_string()])
    );
    assert_eq!(
        cluster.resolve(mode, "m", "v6", 443).map(urls),
        Ok(vec!["https://[fd00::7]:443".to_string()])
    );
    assert_eq!(
        cluster.resolve(mode, "m", "ext", 8443).map(urls),
        Ok(vec!["https://api.example.com:8443".to_string()])
    );
    let port = cluster.resolve(mode, "m", "api", 8443).unwrap_err();
    assert_eq!(
        (port.reason, port.message.as_str()),
        (
            "ServicePortError",
            "service/api in \"m\" is not listening on port 8443"
        )
    );
    let missing = cluster.resolve(mode, "m", "gone", 443).unwrap_err();
    assert_eq!(
        (missing.status, missing.reason),
        ("False", "ServiceNotFound")
    );
    assert_eq!(missing.message, "service/gone in \"m\" is not present");
    assert_eq!(
        cluster
            .resolve(mode, "m", "headless", 443)
            .unwrap_err()
            .reason,
        "FailedDiscoveryCheck"
    );
    assert_eq!(
        cluster.resolve(MODE, "m", "ext", 443).unwrap_err().reason,
        "FailedDiscoveryCheck"
    );
}

#[test]
fn a_service_that_makes_no_url_is_unusable() {
    let cluster = listed(
        &[service(
            "m",
            "ext",
            json!({"type": "ExternalName", "externalName": "not a host"}),
        )],
        &[],
    );
    let unusable = cluster
        .resolve(ServiceResolution::Cluster, "m", "ext", 443)
        .unwrap_err();
    assert_eq!(
        (unusable.status, unusable.reason),
        ("False", "FailedDiscoveryCheck")
    );
    assert!(
        unusable
            .message
            .starts_with("endpoint \"https://not a host:443\": "),
        "{unusable}"
    );
}

#[test]
fn endpoints_are_the_ready_addresses_on_the_named_port() {
    let api = service(
        "m",
        "api",
        json!({"clusterIP": "10.0.0.7", "ports": [{"name": "https", "port": 443, "targetPort": 6443}]}),
    );
    let mut cluster = listed(
        &[api],
        &[
            slice(
                "m",
                "api-a",
                "api",
                6443,
                json!([
                    {"addresses": ["10.1.0.2"], "conditions": {"ready": true}},
                    {"addresses": ["10.1.0.3"], "conditions": {"ready": false}},
                    {"addresses": ["10.1.0.1"]},
                ]),
            ),
            slice(
                "m",
                "api-b",
                "api",
                7443,
                json!([{"addresses": ["10.1.0.9"]}]),
            ),
            slice(
                "m",
                "other",
                "other",
                1,
                json!([{"addresses": ["10.9.9.9"]}]),
            ),
        ],
    );
    assert_eq!(
        cluster.resolve(MODE, "m", "api", 443).map(urls),
        Ok(vec![
            "https://10.1.0.1:6443".into(),
            "https://10.1.0.2:6443".into(),
            "https://10.1.0.9:7443".into()
        ])
    );
    // Scaling down: slice b goes, slice a loses an address.
    assert!(cluster.slice_event(&slice("m", "api-b", "api", 7443, json!([])), true));
    assert!(cluster.slice_event(
        &slice(
            "m",
            "api-a",
            "api",
            6443,
            json!([{"addresses": ["10.1.0.2"]}])
        ),
        false
    ));
    assert_eq!(
        cluster.resolve(MODE, "m", "api", 443).map(urls),
        Ok(vec!["https://10.1.0.2:6443".into()])
    );
    assert!(
        !cluster.slice_event(
            &slice(
                "m",
                "api-a",
                "api",
                6443,
                json!([{"addresses": ["10.1.0.2"]}])
            ),
            false
        ),
        "same facts: no change"
    );
    // No ready address, then no slice at all.
    cluster.slice_event(
        &slice(
            "m",
            "api-a",
            "api",
            6443,
            json!([{"addresses": ["10.1.0.2"], "conditions": {"ready": false}}]),
        ),
        false,
    );
    let empty = cluster.resolve(MODE, "m", "api", 443).unwrap_err();
    assert_eq!(empty.reason, "MissingEndpoints");
    assert_eq!(
        empty.message,
        "endpoints for service/api in \"m\" have no addresses with port name \"https\""
    );
    cluster.slice_event(&slice("m", "api-a", "api", 6443, json!([])), true);
    assert_eq!(
        cluster.resolve(MODE, "m", "api", 443).unwrap_err().reason,
        "EndpointsNotFound"
    );
}

#[test]
fn nothing_resolves_before_the_first_list() {
    let mut cluster = ClusterServices::default();
    cluster.replace_services(&[service(
        "m",
        "api",
        json!({"clusterIP": "10.0.0.7", "ports": [{"port": 443}]}),
    )]);
    assert!(!cluster.settled());
    let waiting = cluster
        .resolve(ServiceResolution::Cluster, "m", "api", 443)
        .unwrap_err();
    assert_eq!(
        (waiting.status, waiting.reason),
        ("Unknown", "ServiceAccessError")
    );
    cluster.set_problem(Some("403 Forbidden".into()));
    let refused = cluster
        .resolve(ServiceResolution::Cluster, "m", "api", 443)
        .unwrap_err();
    assert_eq!(
        refused.message,
        "service/api in \"m\" cannot be checked due to: 403 Forbidden"
    );
    cluster.mark_listed();
    assert!(cluster
        .resolve(ServiceResolution::Cluster, "m", "api", 443)
        .is_ok());
    assert!(cluster.listed() && cluster.settled());
}

#[test]
fn events_report_only_what_resolution_reads() {
    let mut cluster = listed(&[], &[]);
    let api = service(
        "m",
        "api",
        json!({"clusterIP": "10.0.0.7", "ports": [{"port": 443}]}),
    );
    assert!(cluster.service_event(&api, false));
    let mut relabelled = api.clone();
    relabelled["metadata"]["labels"] = json!({"a": "b"});
    relabelled["metadata"]["resourceVersion"] = json!("2");
    assert!(!cluster.service_event(&relabelled, false));
    assert!(cluster.service_event(&api, true));
    assert!(!cluster.service_event(&api, true));
}
