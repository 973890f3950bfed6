//! Loading real fixture APIServices and hand-written configs.

use super::*;

fn fixtures() -> PathBuf {
    apiagg_test_fixtures::existing_root()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write test file");
    p
}

#[test]
fn every_fixture_apiservice_loads_unchanged() {
    let dir = fixtures().join("apiservices");
    assert!(dir.is_dir(), "fixture folder missing: {}", dir.display());
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("read fixture dir") {
        let path = entry.expect("dir entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let cfg = write(
            tmp.path(),
            "c.yaml",
            &format!("apiServiceFiles: [{:?}]\n", path.display().to_string()),
        );
        let loaded =
            GatewayConfig::load(&cfg).unwrap_or_else(|e| panic!("{} failed: {e}", path.display()));
        for s in loaded.api_services {
            names.push(s.object.metadata.name.clone().unwrap_or_default());
        }
    }
    names.sort();
    names.dedup();
    for expected in [
        "v1alpha1.wardle.example.com",
        "v1beta1.metrics.k8s.io",
        "v1beta1.custom.metrics.k8s.io",
        "v1beta2.custom.metrics.k8s.io",
        "v1beta1.external.metrics.k8s.io",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }
}

#[test]
fn templated_karmada_files_are_rejected_with_their_location() {
    let path = fixtures().join("apiservices/templated/karmada-v1.18.2-search.yaml");
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = write(
        tmp.path(),
        "c.yaml",
        &format!("apiServiceFiles: [{:?}]\n", path.display().to_string()),
    );
    let err = GatewayConfig::load(&cfg).unwrap_err();
    assert!(
        err.to_string().contains("karmada-v1.18.2-search.yaml"),
        "{err}"
    );
}

#[test]
fn full_config_with_relative_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(tmp.path().join("apiservices")).expect("mkdir");
    write(
        tmp.path(),
        "apiservices/a.yaml",
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1.a.io}\nspec: {group: a.io, version: v1, groupPriorityMinimum: 100, versionPriority: 10, service: {namespace: ns, name: a}}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: a}\n",
    );
    let cfg = write(
        tmp.path(),
        "c.yaml",
        r#"
listen: 127.0.0.1:9999
services:
  - {namespace: ns, name: a, endpoints: ["http://127.0.0.1:1234"]}
apiServices:
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: v2.b.io}
    spec: {group: b.io, version: v2, groupPriorityMinimum: 200, versionPriority: 20, insecureSkipTLSVerify: true, service: {namespace: ns, name: b, port: 8443}}
apiServiceFiles: ["apiservices/*.yaml"]
"#,
    );
    let c = GatewayConfig::load(&cfg).expect("loads");
    assert_eq!(c.listen, "127.0.0.1:9999");
    assert_eq!(c.services[0].port, 443);
    let names: Vec<_> = c
        .api_services
        .iter()
        .map(|s| s.object.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["v2.b.io", "v1.a.io"]);
    assert!(c.api_services[1].origin.ends_with("a.yaml: document 1"));
}

#[test]
fn invalid_objects_report_file_and_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = write(
        tmp.path(),
        "c.yaml",
        r#"
apiServices:
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: v1.a.io}
    spec: {group: a.io, version: v1, groupPriorityMinimum: 0, versionPriority: 10}
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: v1.a.io}
    spec: {group: a.io, version: v1, groupPriorityMinimum: 10, versionPriority: 10}
  - apiVersion: apiregistration.k8s.io/v1
    kind: APIService
    metadata: {name: v1.a.io}
    spec: {group: a.io, version: v1, groupPriorityMinimum: 10, versionPriority: 10}
"#,
    );
    let err = GatewayConfig::load(&cfg).unwrap_err();
    assert_eq!(err.problems.len(), 2, "{err}");
    assert!(err.problems[0]
        .location
        .ends_with("c.yaml: apiServices[0] (v1.a.io)"));
    assert!(err.problems[0].message.contains(
        "spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000"
    ));
    assert!(err.problems[1].message.contains("duplicate APIService"));
}

#[test]
fn unknown_keys_and_bad_endpoints_are_rejected() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = write(tmp.path(), "c.yaml", "listn: 1\n");
    let err = GatewayConfig::load(&cfg).unwrap_err();
    assert!(err.to_string().contains("unknown field `listn`"), "{err}");
    let cfg = write(
        tmp.path(),
        "d.yaml",
        "services: [{namespace: a, name: b, endpoints: [\"ftp://x\"]}]\n",
    );
    let err = GatewayConfig::load(&cfg).unwrap_err();
    assert!(err.to_string().contains("services[0]"), "{err}");
    let cfg = write(tmp.path(), "f.yaml", "serviceResolution: endpoints\n");
    let err = GatewayConfig::load(&cfg).unwrap_err();
    assert!(
        err.to_string()
            .contains("serviceResolution: needs a delegate"),
        "{err}"
    );
    let cfg = write(tmp.path(), "g.yaml", "serviceResolution: dns\n");
    let err = GatewayConfig::load(&cfg).unwrap_err();
    assert!(err.to_string().contains("unknown variant `dns`"), "{err}");
    let cfg = write(tmp.path(), "e.yaml", "apiServiceFiles: [missing.yaml]\n");
    let err = GatewayConfig::load(&cfg).unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[test]
fn a_builtin_group_may_be_declared_only_as_local() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let entry = |name: &str, group: &str, service: &str| {
        format!("  - {{apiVersion: apiregistration.k8s.io/v1, kind: APIService, metadata: {{name: {name}}}, spec: {{group: {group:?}, version: v1, groupPriorityMinimum: 100, versionPriority: 10{service}}}}}\n")
    };
    let local = format!("apiServices:\n{}", entry("v1.apps", "apps", ""));
    let cfg = write(tmp.path(), "local.yaml", &local);
    assert_eq!(
        GatewayConfig::load(&cfg).expect("local").api_services.len(),
        1
    );
    let remote = format!(
        "apiServices:\n{}{}",
        entry("v1.", "", ", service: {namespace: x, name: y}"),
        entry(
            "v1.example.io",
            "example.io",
            ", service: {namespace: x, name: y}"
        )
    );
    let cfg = write(tmp.path(), "remote.yaml", &remote);
    let err = GatewayConfig::load(&cfg).expect_err("a remote core group is refused");
    assert_eq!(err.problems.len(), 1, "{err}");
    assert!(
        err.problems[0]
            .message
            .contains("group \"\" is built into Kubernetes"),
        "{err}"
    );
}
