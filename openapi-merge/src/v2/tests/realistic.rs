//! The merge of real documents: kube-apiserver with extension API servers and CRD products, and
//! kube-openapi's own aggregator testdata.

use super::inputs::{fixtures, kube_openapi_dir, kube_openapi_inputs, realistic_inputs, reprepare};
use super::*;
use crate::v2::*;
use apiagg_apis::sha512_upper_hex;

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";

/// kube-apiserver as local; oauth/user, metrics, kubevirt subresources, CRD products and Config
/// Connector CRDs as remotes; plus the definitions-only OpenShift document (paths: null).
fn inputs() -> (Vec<LocalSpec>, Vec<RemoteSpec>) {
    realistic_inputs(&fixtures()).unwrap_or_else(|missing| {
        panic!(
            "fixture {} missing or not JSON (set APIAGG_FIXTURES)",
            missing.display()
        )
    })
}

#[test]
fn realistic_merge_follows_the_rules() {
    let (locals, remotes) = inputs();
    let outcome = merge_v2(&locals, &remotes);
    let merged = outcome.as_ref().unwrap();
    assert_eq!(
        merged.etag,
        format!("\"{}\"", sha512_upper_hex(&merged.json))
    );
    let doc = merged_value(&outcome);
    let kube = &locals[0].spec.doc().to_value();

    // Top-level fields come from the first document.
    assert_eq!(doc["swagger"], "2.0");
    for field in ["info", "securityDefinitions", "security"] {
        assert_eq!(doc[field], kube[field], "{field}");
    }
    let top: Vec<&String> = doc.as_object().unwrap().keys().collect();
    let kube_top: Vec<&String> = kube.as_object().unwrap().keys().collect();
    assert_eq!(top, kube_top, "top-level key order is the base document's");

    // Paths: every kube path, plus exactly each remote's `/apis/<g>/<v>/…` paths.
    let paths = keys(&doc, "paths");
    let mut expected = keys(kube, "paths");
    for r in &remotes {
        let prefix = format!("/apis/{}/{}/", r.group, r.version);
        expected.extend(
            keys(&r.spec.doc().to_value(), "paths")
                .into_iter()
                .filter(|p| p.starts_with(&prefix)),
        );
    }
    assert_eq!(paths, expected);
    for present in [
        "/api/v1/namespaces/{namespace}/pods",
        "/apis/oauth.openshift.io/v1/oauthaccesstokens",
        "/apis/user.openshift.io/v1/users/{name}",
        "/apis/metrics.k8s.io/v1beta1/nodes",
        "/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/{name}/console",
        "/apis/subresources.kubevirt.io/v1alpha3/healthz",
        "/apis/cert-manager.io/v1/certificates",
    ] {
        assert!(paths.contains(present), "missing {present}");
    }
    // kube's own `/apis/` and `/version/` stay as they are; the remotes' copies are dropped.
    for kube_only in ["/apis/", "/version/"] {
        assert_eq!(doc["paths"][kube_only], kube["paths"][kube_only]);
    }
    for dropped in [
        "/healthz",
        "/apis",
        "/openapi/v2",
        "/dump-profiler",
        "/apis/metrics.k8s.io/",
        "/apis/oauth.openshift.io/v1",
        "/apis/metrics.k8s.io/v1beta1",
        "/apis/subresources.kubevirt.io/v1",
        "/apis/kubevirt.io/v1/virtualmachines",
        "/apis/cert-manager.io/v1alpha2/certificates",
    ] {
        assert!(!paths.contains(dropped), "{dropped} should be dropped");
    }
    assert_eq!(keys(kube, "paths").len(), 478);
    assert_eq!(
        paths.len(),
        777,
        "478 kube paths + 299 from the remotes' own group-versions"
    );

    // Every $ref resolves; the kube shared parameters survive.
    assert!(assert_refs_resolve(&doc) > 5000);
    assert!(keys(kube, "parameters").is_subset(&keys(&doc, "parameters")));

    // Conflicting definitions were renamed; their documents point to the renamed copies.
    let defs = doc["definitions"].as_object().unwrap();
    // Regression anchors for this input set: 838 definitions, 35 of them renamed twins.
    assert_eq!(defs.len(), 838);
    assert_eq!(defs.keys().filter(|k| k.contains("_v")).count(), 35);
    assert!(defs.contains_key(&format!("{META}Status_v5")));
    for renamed in [
        "DeleteOptions_v2",
        "ObjectMeta_v2",
        "ListMeta_v2",
        "APIResourceList_v2",
    ] {
        let name = format!("{META}{renamed}");
        assert!(defs.contains_key(&name), "missing {name}");
    }
    assert_ne!(
        without_gvk(&defs[&format!("{META}ObjectMeta")]),
        without_gvk(&defs[&format!("{META}ObjectMeta_v2")])
    );
    let cert = &doc["definitions"]["io.cert-manager.v1.Certificate"];
    assert_eq!(
        cert["properties"]["metadata"]["$ref"],
        format!("#/definitions/{META}ObjectMeta_v2"),
        "cert-manager's ObjectMeta differs from kube's and was renamed"
    );
    // kube's own references are untouched.
    assert_eq!(
        doc["definitions"]["io.k8s.api.core.v1.Pod"]["properties"]["metadata"]["$ref"],
        format!("#/definitions/{META}ObjectMeta")
    );

    // Identical definitions are shared, never duplicated under a `_vN` name.
    for (name, value) in defs {
        if let Some((base, n)) = name.rsplit_once("_v") {
            if n.parse::<u32>().is_ok() {
                let base_value = defs
                    .get(base)
                    .expect("renamed definitions have an original");
                assert_ne!(
                    without_gvk(base_value),
                    without_gvk(value),
                    "{name} duplicates {base}"
                );
                // Twins (`_v2` vs `_v3`) may end up equal once their own references are renamed:
                // like upstream, definitions are compared before renaming.
            }
        }
    }
    assert!(defs.contains_key(&format!("{META}Time")));
    assert!(!defs.contains_key(&format!("{META}Time_v2")));

    // Vendor extensions survive on operations and definitions.
    let list_pods = &doc["paths"]["/api/v1/namespaces/{namespace}/pods"]["get"];
    assert_eq!(list_pods["x-kubernetes-action"], "list");
    assert_eq!(list_pods["x-kubernetes-group-version-kind"]["kind"], "Pod");
    assert_eq!(
        defs["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"][0]["kind"],
        "Pod"
    );

    // The definitions-only OpenShift document contributes nothing.
    assert!(!defs.contains_key("com.github.openshift.api.config.v1.ClusterVersion"));
    // Definitions only used by dropped paths are pruned (kubevirt's `kubevirt.io` CRD types are
    // used only under `/apis/kubevirt.io/…`, its subresource request bodies are kept).
    assert!(!defs.contains_key("v1.KubeVirt"));
    assert!(defs.contains_key("v1.VirtualMachineInstanceGuestAgentInfo"));
    // Kube definitions no path uses are kept (a local is not pruned).
    assert!(keys(kube, "definitions").is_subset(&keys(&doc, "definitions")));
}

#[test]
fn merge_is_deterministic_and_input_order_independent() {
    let (locals, mut remotes) = inputs();
    let a = merge_v2(&locals, &remotes).unwrap();
    remotes.reverse();
    let b = merge_v2(&locals, &remotes).unwrap();
    assert_eq!(a.etag, b.etag);
    assert_eq!(a.json, b.json);
    // Preparing the same documents again (a new download) gives the same merge.
    let (locals, remotes) = reprepare(&locals, &remotes);
    let c = merge_v2(&locals, &remotes).unwrap();
    assert_eq!(a.json, c.json);
}

/// kube-openapi's own expected result for merging its aggregator testdata (`openapi-1` and
/// `openapi-2` into `openapi-0` = `openapi.json`). Optional: skipped when the testdata is absent.
#[test]
fn matches_kube_openapi_expected_merge_of_its_testdata() {
    let dir = kube_openapi_dir();
    let expected_file = dir.join("openapi.json");
    if !expected_file.exists() {
        eprintln!(
            "skipping: kube-openapi testdata not in {} (golang-k8s-kube-openapi-dev)",
            dir.display()
        );
        return;
    }
    let locals = kube_openapi_inputs()
        .unwrap_or_else(|dir| panic!("kube-openapi testdata in {} unreadable", dir.display()));
    let bytes = std::fs::read(&expected_file).expect("read openapi.json");
    let expected: Value = serde_json::from_slice(&bytes).expect("openapi.json parses");
    let ours = merged_value(&merge_v2(&locals, &[]));
    assert_eq!(keys(&ours, "paths"), keys(&expected, "paths"));
    assert_eq!(keys(&ours, "definitions"), keys(&expected, "definitions"));
    for name in keys(&expected, "definitions") {
        assert_eq!(
            ours["definitions"][&name], expected["definitions"][&name],
            "{name}"
        );
    }
    for path in keys(&expected, "paths") {
        assert_eq!(ours["paths"][&path], expected["paths"][&path], "{path}");
    }
    for field in ["swagger", "info", "securityDefinitions", "security"] {
        assert_eq!(ours[field], expected[field], "{field}");
    }
    // 14 + 442 + 8 paths, two of them conflicting; the loser's now-unused definitions pruned.
    assert_eq!(
        (keys(&ours, "paths").len(), keys(&ours, "definitions").len()),
        (462, 828)
    );
    assert_refs_resolve(&ours);
}
