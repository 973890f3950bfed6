//! The OpenAPI controller's second pure step: what the published documents are merged from,
//! given the registry and the sources' current documents.

use std::collections::HashSet;
use std::sync::Arc;

use apiagg_config::{Backend, Registry};
use apiagg_openapi_merge::{
    merge_order, v3_key, without_remote_keys, LocalSpec, OrderKey, RemoteSpec, V2Inputs, V3Input,
};

use super::own;
use super::sources::Sources;

/// Name of the delegate's v2 document in the merge (kube-aggregator's naming).
pub const DELEGATE_SPEC: &str = "k8s_internal_local_delegation_chain_0000000001";

/// What `/openapi/v2` and `/openapi/v3` are merged from.
pub struct Inputs {
    /// The v2 merge's documents.
    pub v2: V2Inputs,
    /// The v3 sources, in precedence order.
    pub v3: Vec<V3Input>,
}

/// The merge inputs of `registry` from `sources`. v2: the delegate's document (apiagg's own
/// description of its APIService API without one), then every remote APIService's, in merge
/// order. v3: the delegate's documents except those of remote group-versions (its
/// `apiregistration.k8s.io/v1` included: without it, apiagg's own), then the remote ones in
/// merge order.
pub fn merge_inputs(registry: &Registry, sources: &Sources) -> Inputs {
    let mut v2 = V2Inputs::default();
    match sources.local.as_ref().and_then(|l| l.spec.clone()) {
        Some(spec) => v2.locals.push(LocalSpec {
            name: DELEGATE_SPEC.into(),
            spec,
        }),
        None => v2.locals.extend(own::v2()),
    }
    // apiregistration.k8s.io/v1 as in v2: the delegate's description of the same API when
    // it has one (kube-apiserver's, word for word), apiagg's own without.
    let own_key = crate::apiservices::V3_KEY;
    let delegate_describes = (sources.local.as_ref())
        .is_some_and(|l| l.v3.documents().any(|(_, d)| d.doc.key == own_key));
    let (mut remote_docs, mut remote_keys) = match delegate_describes {
        true => (Vec::new(), HashSet::new()),
        false => (vec![own::v3()], HashSet::from([own_key.to_string()])),
    };
    let remotes: Vec<_> = registry
        .entries()
        .iter()
        .filter_map(|e| match &e.backend {
            Backend::Remote(r) => Some((e, (r.namespace.clone(), r.service.clone(), r.port))),
            Backend::Delegate => None,
        })
        .collect();
    let keys: Vec<OrderKey<'_>> = remotes
        .iter()
        .map(|(e, _)| OrderKey {
            apiservice: &e.name,
            group: &e.group,
            version: &e.version,
            group_priority_minimum: e.group_priority_minimum,
            version_priority: e.version_priority,
        })
        .collect();
    for (entry, key) in merge_order(&keys)
        .into_iter()
        .filter_map(|i| remotes.get(i))
    {
        let v3 = v3_key(&entry.group, &entry.version);
        let source = sources.services.get(key);
        if let Some(spec) = source.and_then(|s| s.specs.get(&entry.name)) {
            v2.remotes.push(RemoteSpec {
                apiservice: entry.name.clone(),
                group: entry.group.clone(),
                version: entry.version.clone(),
                group_priority_minimum: entry.group_priority_minimum,
                version_priority: entry.version_priority,
                spec: Arc::clone(spec),
            });
        }
        if let Some(doc) = source.and_then(|s| s.v3.get(&v3)) {
            remote_docs.push(V3Input {
                name: entry.name.clone(),
                docs: vec![Arc::clone(doc)],
            });
        }
        remote_keys.insert(v3);
    }
    let mut v3 = Vec::with_capacity(remote_docs.len() + 1);
    if let Some(local) = &sources.local {
        let mut docs: Vec<_> = local.v3.documents().map(|(_, d)| Arc::clone(d)).collect();
        docs.sort_by(|a, b| a.doc.key.cmp(&b.doc.key));
        v3.push(V3Input {
            name: "delegate".into(),
            docs: without_remote_keys(docs, &remote_keys),
        });
    }
    v3.extend(remote_docs);
    Inputs { v2, v3 }
}
