//! The discovery controller's pure steps: what a round reads (every backend Service once, and
//! the delegate) from the route table, and the group-version entries the merged document is
//! rendered from.

use std::collections::HashMap;
use std::sync::Arc;

use apiagg_config::{route_key, Registry};
use apiagg_discovery::{
    APIGroupDiscoveryList, APIVersionDiscovery, GroupVersionEntry, Priority, Source,
};

use crate::backends::{RouteTable, Upstream};
use crate::controllers::targets::{targets, Target};

/// Priorities of a delegate group-version the registry does not list.
const UNLISTED: Priority = Priority {
    group: 1000,
    version: 100,
};

/// One APIService's discovery: its last good document and whether the latest fetch succeeded.
#[derive(Debug, Default, Clone)]
pub struct GvState {
    /// The last good document.
    pub cached: Option<Arc<APIVersionDiscovery>>,
    /// Whether the latest fetch succeeded.
    pub ok: bool,
}

/// What one round reads.
pub struct Plan {
    /// Every backend Service behind a remote APIService, with the APIServices it serves.
    pub services: Vec<Target>,
    /// The delegate, when one is configured.
    pub delegate: Option<DelegateReads>,
}

/// What is read from the delegate.
pub struct DelegateReads {
    /// Its endpoints.
    pub upstream: Arc<Upstream>,
    /// Its local group-versions under `/apis` (registry order, core group left out), read one
    /// by one when its `/apis` answer is not aggregated.
    pub legacy: Vec<(String, String)>,
}

/// What a round reads for `routes`.
pub fn plan(routes: &RouteTable) -> Plan {
    let delegate = routes.delegate.as_ref().map(|upstream| DelegateReads {
        upstream: Arc::clone(upstream),
        legacy: routes
            .registry
            .entries()
            .iter()
            .filter(|e| e.is_delegated() && !e.group.is_empty())
            .map(|e| (e.group.clone(), e.version.clone()))
            .collect(),
    });
    Plan {
        services: targets(routes),
        delegate,
    }
}

/// The entries of the merged document: the delegate's group-versions with the registry's
/// priorities, apiagg's own `apiregistration.k8s.io` in place of the delegate's, then every
/// remote APIService from its last good document (`Stale` when its latest fetch failed or
/// never ran).
pub fn entries(
    registry: &Registry,
    local: Option<&APIGroupDiscoveryList>,
    gvs: &HashMap<String, GvState>,
) -> Vec<GroupVersionEntry> {
    let mut entries = Vec::new();
    if let Some(local) = local {
        let priority_of = |g: &str, v: &str| {
            registry
                .lookup(&route_key(g, v))
                .map_or(UNLISTED, |e| Priority {
                    group: e.group_priority_minimum,
                    version: e.version_priority,
                })
        };
        entries.extend(GroupVersionEntry::from_local_document(
            local,
            Source::Local,
            priority_of,
        ));
    }
    // apiagg serves apiregistration.k8s.io itself: the delegate's copy is hidden.
    entries.retain(|e| e.group != crate::apiservices::GROUP);
    entries.extend(crate::apiservices::discovery_entry());
    for entry in registry.entries().iter().filter(|e| !e.is_delegated()) {
        // Stale only when its discovery could not be fetched (an unavailable backend's fetch
        // fails in the round its availability change starts).
        let state = gvs.get(&entry.name).cloned().unwrap_or_default();
        entries.push(GroupVersionEntry::remote(
            &entry.group,
            &entry.version,
            Priority {
                group: entry.group_priority_minimum,
                version: entry.version_priority,
            },
            state.cached,
            state.ok,
        ));
    }
    entries
}
