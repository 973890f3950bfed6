//! One round's reads: a backend Service's discovery (aggregated `/apis` with `If-None-Match`,
//! the legacy documents as fallback) and the delegate's.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use apiagg_discovery::{
    convert_resource_list, split_group_versions, APIGroupDiscoveryList, APIResourceList,
    APIVersionDiscovery,
};

use super::plan::{DelegateReads, GvState};
use crate::backends::{Client, Clients, FetchError, Fetched};
use crate::controllers::targets::{group_version_path, Target};
use apiagg_observe::Repeats;

/// What backends are asked for at `/apis`.
const AGGREGATED_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
/// Upper bound of one discovery request (kube-aggregator's `pkg/apiserver/handler_discovery.go`).
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Group-version documents indexed by `"<group>/<version>"`.
type GvDocs = HashMap<String, Arc<APIVersionDiscovery>>;

fn gv_key(group: &str, version: &str) -> String {
    format!("{group}/{version}")
}

/// What is known about one Service between rounds.
#[derive(Default)]
pub struct ServiceState {
    /// ETag and documents of the last aggregated answer.
    etag: Option<String>,
    aggregated: Option<GvDocs>,
}

/// Whether a `Content-Type` is aggregated discovery (v2 or v2beta1).
pub fn is_aggregated(content_type: &str) -> bool {
    let mut parts = content_type.split(';').map(str::trim);
    let base = parts.next().unwrap_or("");
    let params: Vec<&str> = parts.collect();
    base.eq_ignore_ascii_case("application/json")
        && params.contains(&"g=apidiscovery.k8s.io")
        && params.contains(&"as=APIGroupDiscoveryList")
        && (params.contains(&"v=v2") || params.contains(&"v=v2beta1"))
}

fn decode_aggregated(fetched: &Fetched) -> Result<GvDocs, FetchError> {
    let list: APIGroupDiscoveryList = fetched.json()?;
    Ok(split_group_versions(list)
        .into_iter()
        .map(|(group, version)| (gv_key(&group, &version.version), Arc::new(version)))
        .collect())
}

async fn fetch_legacy(
    client: &Client,
    group: &str,
    version: &str,
) -> Result<APIVersionDiscovery, FetchError> {
    let path = group_version_path(group, version);
    let fetched = client
        .get(&path, "application/json", None, FETCH_TIMEOUT)
        .await?;
    let list: APIResourceList = fetched.json()?;
    convert_resource_list(version, &list).map_err(|e| fetched.invalid(e))
}

/// Fetches one Service: aggregated `/apis` with If-None-Match, legacy fallback per APIService.
pub async fn fetch_service(
    clients: &Clients,
    target: &Target,
    state: &mut ServiceState,
    gvs: &mut HashMap<String, GvState>,
    repeats: &Repeats,
) {
    let key = format!("{:?}", target.key);
    let fail_all = |gvs: &mut HashMap<String, GvState>, why: &dyn std::fmt::Display| {
        for api in &target.apiservices {
            tracing::debug!(apiservice = %api.name, "discovery failed: {why}");
            gvs.entry(api.name.clone()).or_default().ok = false;
        }
    };
    let Some(upstream) = &target.upstream else {
        fail_all(gvs, &"no endpoints");
        return;
    };
    let client = match clients.pick(upstream) {
        Ok(c) => c,
        Err(e) => {
            fail_all(gvs, &e);
            return;
        }
    };
    let answer = client
        .get(
            "/apis",
            AGGREGATED_ACCEPT,
            state.etag.as_deref(),
            FETCH_TIMEOUT,
        )
        .await;
    let docs = match answer {
        Ok(f) if f.status == 304 && state.aggregated.is_some() => state.aggregated.clone(),
        Ok(f) if f.status == 200 && is_aggregated(&f.content_type) => match decode_aggregated(&f) {
            Ok(docs) => {
                state.etag = f.etag.clone();
                state.aggregated = Some(docs.clone());
                Some(docs)
            }
            Err(e) => {
                repeats.warn(&key, &format!("discovery: {e}"));
                fail_all(gvs, &e);
                return;
            }
        },
        Ok(f) if f.status == 503 => {
            fail_all(gvs, &"503 from backend");
            return;
        }
        Ok(_) => None,
        Err(e) => {
            repeats.warn(&key, &format!("discovery: {e}"));
            fail_all(gvs, &e);
            return;
        }
    };
    repeats.recovered(&key, "discovery");
    match docs {
        Some(docs) => {
            for api in &target.apiservices {
                let doc = docs
                    .get(&gv_key(&api.group, &api.version))
                    .cloned()
                    .unwrap_or_else(|| Arc::new(APIVersionDiscovery::empty(&api.version)));
                gvs.insert(
                    api.name.clone(),
                    GvState {
                        cached: Some(doc),
                        ok: true,
                    },
                );
            }
        }
        None => {
            // Not an aggregated answer: read every group-version the legacy way (not cached).
            state.etag = None;
            state.aggregated = None;
            for api in &target.apiservices {
                let slot = gvs.entry(api.name.clone()).or_default();
                match fetch_legacy(&client, &api.group, &api.version).await {
                    Ok(doc) => {
                        slot.cached = Some(Arc::new(doc));
                        slot.ok = true;
                    }
                    Err(e) => {
                        repeats.warn(&api.name, &format!("discovery: {e}"));
                        slot.ok = false;
                    }
                }
            }
        }
    }
}

/// The delegate's aggregated `/apis`, converted from its legacy documents when it has none.
pub async fn fetch_local(
    clients: &Clients,
    delegate: &DelegateReads,
) -> Result<APIGroupDiscoveryList, FetchError> {
    let client = clients.pick(&delegate.upstream)?;
    let fetched = client
        .get("/apis", AGGREGATED_ACCEPT, None, FETCH_TIMEOUT)
        .await?;
    if fetched.status == 200 && is_aggregated(&fetched.content_type) {
        return fetched.json();
    }
    let mut by_group: Vec<apiagg_discovery::APIGroupDiscovery> = Vec::new();
    for (group, version) in &delegate.legacy {
        let version = fetch_legacy(&client, group, version).await?;
        match by_group.iter_mut().find(|g| &g.metadata.name == group) {
            Some(g) => g.versions.push(version),
            None => by_group.push(apiagg_discovery::APIGroupDiscovery {
                metadata: apiagg_discovery::GroupMeta::named(group),
                versions: vec![version],
                ..Default::default()
            }),
        }
    }
    Ok(APIGroupDiscoveryList::v2(by_group))
}

#[cfg(test)]
mod tests {
    use super::is_aggregated;

    #[test]
    fn recognises_aggregated_content_types() {
        assert!(is_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        ));
        assert!(is_aggregated(
            "application/json; as=APIGroupDiscoveryList; v=v2beta1; g=apidiscovery.k8s.io"
        ));
        assert!(!is_aggregated("application/json"));
        assert!(!is_aggregated("text/html"));
    }
}
