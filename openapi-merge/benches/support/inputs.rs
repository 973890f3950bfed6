//! The merge inputs shared by the benchmark, the `merge_v2_memory` example and the crate's merge
//! tests, included by each with `#[path]`. The including module brings `LocalSpec`, `PreparedV2`
//! and `RemoteSpec` into scope.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::{LocalSpec, PreparedV2, RemoteSpec};

pub fn load(path: &Path) -> Option<Arc<Value>> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok().map(Arc::new)
}

pub fn fixtures() -> PathBuf {
    apiagg_test_fixtures::existing_root()
}

/// A prepared local spec (the fixtures are known to be usable).
pub fn local(name: &str, doc: Arc<Value>) -> LocalSpec {
    let spec = PreparedV2::local(&doc).unwrap_or_else(|e| panic!("{name}: {e}"));
    LocalSpec {
        name: name.into(),
        spec: Arc::new(spec),
    }
}

/// A prepared remote spec for `<version>.<group>`.
pub fn remote(group: &str, version: &str, gpm: i32, vp: i32, doc: Arc<Value>) -> RemoteSpec {
    let spec = PreparedV2::remote(&doc, group, version).unwrap_or_else(|e| panic!("{group}: {e}"));
    RemoteSpec {
        apiservice: format!("{version}.{group}"),
        group: group.into(),
        version: version.into(),
        group_priority_minimum: gpm,
        version_priority: vp,
        spec: Arc::new(spec),
    }
}

/// Prepares every input again from its compact document (the per-APIService work of a
/// download, after the document is parsed).
pub fn reprepare(
    locals: &[LocalSpec],
    remotes: &[RemoteSpec],
) -> (Vec<LocalSpec>, Vec<RemoteSpec>) {
    let locals = locals
        .iter()
        .map(|l| {
            let spec = PreparedV2::local_source(Arc::clone(l.spec.doc()));
            LocalSpec {
                name: l.name.clone(),
                spec: Arc::new(spec.unwrap_or_else(|e| panic!("{}: {e}", l.name))),
            }
        })
        .collect();
    let remotes = remotes
        .iter()
        .map(|r| {
            let doc = Arc::clone(r.spec.doc());
            let spec = PreparedV2::remote_source(doc, &r.group, &r.version);
            RemoteSpec {
                spec: Arc::new(spec.unwrap_or_else(|e| panic!("{}: {e}", r.group))),
                ..r.clone()
            }
        })
        .collect();
    (locals, remotes)
}

/// The realistic inputs (same set as the crate's tests), or the missing path.
pub fn realistic_inputs(dir: &Path) -> Result<(Vec<LocalSpec>, Vec<RemoteSpec>), PathBuf> {
    let get = |rel: &str| load(&dir.join(rel)).ok_or_else(|| dir.join(rel));
    let locals = vec![local(
        "k8s_internal_local_delegation_chain_0000000001",
        get("kubernetes/openapi-v2/swagger-v1.32.json")?,
    )];
    let oauth = get("extension-apiservers/oauth-apiserver/openapi-v2/swagger.json")?;
    let kubevirt = get("extension-apiservers/kubevirt/swagger-v1.9.0.json")?;
    let mut remotes = vec![
        remote("oauth.openshift.io", "v1", 9900, 15, oauth.clone()),
        remote("user.openshift.io", "v1", 9900, 15, oauth),
        remote(
            "metrics.k8s.io",
            "v1beta1",
            100,
            100,
            get("extension-apiservers/metrics-server/openapi-v2-metrics-server-0.4.0.json")?,
        ),
        remote("subresources.kubevirt.io", "v1", 1000, 15, kubevirt.clone()),
        remote("subresources.kubevirt.io", "v1alpha3", 1000, 10, kubevirt),
        remote(
            "config.openshift.io",
            "v1",
            1000,
            15,
            get("large/openshift-api-openapi.json")?,
        ),
    ];
    for (file, group, version) in [
        ("cert-manager-1.5.3", "cert-manager.io", "v1"),
        ("chaos-mesh-2.0.0", "chaos-mesh.org", "v1alpha1"),
        ("dapr-1.4.1", "dapr.io", "v1alpha1"),
        ("istio-1.11.3", "networking.istio.io", "v1alpha3"),
        ("knative-0.22.0", "serving.knative.dev", "v1"),
        ("kudo-0.19.0", "kudo.dev", "v1beta1"),
    ] {
        remotes.push(remote(
            group,
            version,
            1000,
            100,
            get(&format!("large/crd-openapi-v2/{file}.json"))?,
        ));
    }
    for file in [
        "accesscontextmanager_v1beta1_accesscontextmanagerserviceperimeter",
        "container_v1beta1_containercluster",
        "dataproc_v1beta1_dataprocworkflowtemplate",
        "dlp_v1beta1_dlpdeidentifytemplate",
        "monitoring_v1beta1_monitoringalertpolicy",
        "privateca_v1beta1_privatecacertificate",
        "storagetransfer_v1beta1_storagetransferjob",
        "vpcaccess_v1beta1_vpcaccessconnector",
    ] {
        let service = file.split('_').next().unwrap_or_default();
        let doc = get(&format!(
            "large/config-connector-crds/openapiv2/{file}.json"
        ))?;
        remotes.push(remote(
            &format!("{service}.cnrm.cloud.google.com"),
            "v1beta1",
            1000,
            100,
            doc,
        ));
    }
    Ok((locals, remotes))
}

/// kube-openapi's aggregator testdata: `$KUBE_OPENAPI_TESTDATA`, else where Debian's
/// `golang-k8s-kube-openapi-dev` puts it.
pub fn kube_openapi_dir() -> PathBuf {
    std::env::var_os("KUBE_OPENAPI_TESTDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(
                "/usr/share/gocode/src/k8s.io/kube-openapi/test/integration/testdata/aggregator",
            )
        })
}

/// kube-openapi's aggregator testdata (`openapi-0/1/2.json`) as three locals, or the directory.
pub fn kube_openapi_inputs() -> Result<Vec<LocalSpec>, PathBuf> {
    let dir = kube_openapi_dir();
    (0..3)
        .map(|i| {
            load(&dir.join(format!("openapi-{i}.json")))
                .map(|doc| local(&format!("openapi-{i}"), doc))
                .ok_or_else(|| dir.clone())
        })
        .collect()
}
