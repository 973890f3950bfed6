//! Aggregated `/apis` built from per-group-version entries (k8s.io/apiserver's
//! `pkg/endpoints/discovery/aggregated/handler.go`, fed by kube-aggregator's
//! `pkg/apiserver/handler_discovery.go`).

use std::collections::HashMap;
use std::sync::Arc;

use apiagg_apis::compare_versions;

use crate::order::APIREGISTRATION_GROUP;
use crate::types::{
    APIGroupDiscovery, APIGroupDiscoveryList, APIVersionDiscovery, Freshness, GroupMeta,
};

/// Where a group-version comes from. When several sources serve the same group-version the
/// one with the lowest [`Source::precedence`] wins (remote beats local beats CRD).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// A remote APIService fetched by the gateway (upstream "Aggregator", 0).
    Remote,
    /// A built-in group of the delegate (upstream "Builtin", 100).
    Local,
    /// A CRD group of the delegate (upstream "CRD", 200).
    Crd,
}

impl Source {
    /// Upstream source number; lower wins.
    pub fn precedence(self) -> u8 {
        match self {
            Source::Remote => 0,
            Source::Local => 100,
            Source::Crd => 200,
        }
    }
}

/// `(groupPriorityMinimum, versionPriority)` of one group-version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Priority {
    /// Higher groups come first.
    pub group: i32,
    /// Higher versions come first within a group.
    pub version: i32,
}

impl Default for Priority {
    /// Upstream default for group-versions that never got a priority: (1000, 15).
    fn default() -> Self {
        Self {
            group: 1000,
            version: 15,
        }
    }
}

/// Priority pinned on `apiregistration.k8s.io/v1` so it is always listed first.
pub const APIREGISTRATION_PRIORITY: Priority = Priority {
    group: 20001,
    version: 0,
};

/// One group-version as the gateway keeps it per backend. `discovery` is shared (`Arc`) so a
/// merge over hundreds of backends copies pointers, not documents.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupVersionEntry {
    /// Group name.
    pub group: String,
    /// Who serves it.
    pub source: Source,
    /// Its priorities (`Priority::default()` when unknown).
    pub priority: Priority,
    /// Freshness to publish; overrides whatever `discovery` carries.
    pub freshness: Freshness,
    /// The version entry (its `version` names the group-version).
    pub discovery: Arc<APIVersionDiscovery>,
}

impl GroupVersionEntry {
    /// A remote group-version as kube-aggregator's discovery manager
    /// (`pkg/apiserver/handler_discovery.go`) publishes it after a fetch.
    ///
    /// `cached` is this group-version's entry from the backend's last good document, if any
    /// (`None` also when that document lacked the group-version); `fetch_ok` is whether the
    /// latest fetch succeeded. Failure without a cached entry yields an empty `Stale` version.
    pub fn remote(
        group: &str,
        version: &str,
        priority: Priority,
        cached: Option<Arc<APIVersionDiscovery>>,
        fetch_ok: bool,
    ) -> Self {
        Self {
            group: group.to_owned(),
            source: Source::Remote,
            priority,
            freshness: if fetch_ok {
                Freshness::Current
            } else {
                Freshness::Stale
            },
            discovery: cached.unwrap_or_else(|| Arc::new(APIVersionDiscovery::empty(version))),
        }
    }

    /// Entries for every group-version of a local (delegate) aggregated document, all
    /// `Current`. `priority_of(group, version)` supplies the priorities.
    pub fn from_local_document(
        list: &APIGroupDiscoveryList,
        source: Source,
        mut priority_of: impl FnMut(&str, &str) -> Priority,
    ) -> Vec<Self> {
        let mut out = Vec::new();
        for group in &list.items {
            for version in &group.versions {
                out.push(Self {
                    group: group.metadata.name.clone(),
                    source,
                    priority: priority_of(&group.metadata.name, &version.version),
                    freshness: Freshness::Current,
                    discovery: Arc::new(version.clone()),
                });
            }
        }
        out
    }

    fn version(&self) -> &str {
        &self.discovery.version
    }

    fn effective_priority(&self) -> Priority {
        if self.group == APIREGISTRATION_GROUP && self.version() == "v1" {
            APIREGISTRATION_PRIORITY
        } else {
            self.priority
        }
    }
}

/// One merged group: its name and winning entries, preferred version first.
pub type MergedGroup<'a> = (&'a str, Vec<&'a GroupVersionEntry>);

/// Merges group-version entries into the aggregated v2 list.
///
/// Per group-version the entry with the lowest source precedence wins (the first one given on
/// a tie). Groups are ordered by the highest `groupPriorityMinimum` among their winning
/// versions, descending, then by name; versions by `versionPriority` descending, then
/// kube-aware. `apiregistration.k8s.io/v1` is pinned to (20001, 0).
pub fn merge_aggregated(entries: &[GroupVersionEntry]) -> APIGroupDiscoveryList {
    let items = merge_plan(entries)
        .into_iter()
        .map(|(name, versions)| APIGroupDiscovery {
            metadata: GroupMeta::named(name),
            versions: versions
                .into_iter()
                .map(|e| {
                    let mut v = (*e.discovery).clone();
                    v.freshness = Some(e.freshness);
                    v
                })
                .collect(),
            ..APIGroupDiscovery::default()
        })
        .collect();
    APIGroupDiscoveryList::v2(items)
}

/// The order [`merge_aggregated`] produces, without copying any document; used by
/// [`crate::render_merged`].
pub fn merge_plan(entries: &[GroupVersionEntry]) -> Vec<MergedGroup<'_>> {
    // groups in first-seen order, each with the indices of its winning entries
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut group_slot: HashMap<&str, usize> = HashMap::new();
    // (group, version) -> position of the winner inside its group's member list
    let mut winner: HashMap<(&str, &str), usize> = HashMap::new();

    for (i, e) in entries.iter().enumerate() {
        let slot = *group_slot.entry(e.group.as_str()).or_insert_with(|| {
            groups.push((e.group.as_str(), Vec::new()));
            groups.len() - 1
        });
        let Some((_, members)) = groups.get_mut(slot) else {
            continue;
        };
        match winner.get(&(e.group.as_str(), e.version())) {
            Some(&pos) => {
                let better = members
                    .get(pos)
                    .and_then(|&cur| entries.get(cur))
                    .is_some_and(|cur| e.source.precedence() < cur.source.precedence());
                if better {
                    if let Some(cur) = members.get_mut(pos) {
                        *cur = i;
                    }
                }
            }
            None => {
                winner.insert((e.group.as_str(), e.version()), members.len());
                members.push(i);
            }
        }
    }

    let mut ordered: Vec<(i32, MergedGroup<'_>)> = groups
        .into_iter()
        .map(|(name, members)| {
            let mut versions: Vec<&GroupVersionEntry> =
                members.iter().filter_map(|&i| entries.get(i)).collect();
            versions.sort_by(|a, b| {
                compare_versions(
                    (a.version(), a.effective_priority().version),
                    (b.version(), b.effective_priority().version),
                )
            });
            let top = versions
                .iter()
                .map(|e| e.effective_priority().group)
                .max()
                .unwrap_or(0);
            (top, (name, versions))
        })
        .collect();
    ordered.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1 .0.cmp(b.1 .0)));
    ordered.into_iter().map(|(_, group)| group).collect()
}
