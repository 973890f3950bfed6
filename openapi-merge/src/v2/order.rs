//! Merge order of remote APIServices (kube-aggregator's
//! `pkg/controllers/openapi/aggregator/priority.go`, with the same-group improvement listed in
//! `docs/differences-from-kube-aggregator.md`).

use std::collections::HashMap;

use apiagg_apis::compare_versions;

use super::RemoteSpec;

/// What the merge order reads of a remote APIService.
#[derive(Debug, Clone, Copy)]
pub struct OrderKey<'a> {
    /// APIService name.
    pub apiservice: &'a str,
    /// `spec.group`.
    pub group: &'a str,
    /// `spec.version`.
    pub version: &'a str,
    /// `spec.groupPriorityMinimum`.
    pub group_priority_minimum: i32,
    /// `spec.versionPriority`.
    pub version_priority: i32,
}

/// Returns the indices of `keys` in merge order (earlier wins path conflicts); the `/openapi/v3`
/// index uses the same order for its sources.
///
/// * Groups by group priority descending: the maximum `groupPriorityMinimum` over the group's
///   remote APIServices, as upstream.
/// * Equal-priority groups by the smallest APIService name in the group (upstream orders by
///   APIService name; taking the group's smallest name keeps a group's versions together, which
///   upstream's pairwise comparator does not guarantee), then by group name.
/// * Inside a group: `versionPriority` descending, then kube-aware version order, then APIService
///   name. Upstream means to do this but compares an entry with itself, so it falls back to names.
pub fn merge_order(keys: &[OrderKey<'_>]) -> Vec<usize> {
    let mut groups: HashMap<&str, (i32, &str)> = HashMap::new();
    for key in keys {
        let entry = groups
            .entry(key.group)
            .or_insert((key.group_priority_minimum, key.apiservice));
        entry.0 = entry.0.max(key.group_priority_minimum);
        if key.apiservice < entry.1 {
            entry.1 = key.apiservice;
        }
    }
    let group_key = |k: &OrderKey<'_>| groups.get(k.group).copied().unwrap_or((0, ""));
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&i, &j| {
        let (a, b) = (&keys[i], &keys[j]);
        let ((a_prio, a_name), (b_prio, b_name)) = (group_key(a), group_key(b));
        b_prio
            .cmp(&a_prio)
            .then_with(|| a_name.cmp(b_name))
            .then_with(|| a.group.cmp(b.group))
            .then_with(|| {
                compare_versions(
                    (a.version, a.version_priority),
                    (b.version, b.version_priority),
                )
            })
            .then_with(|| a.apiservice.cmp(b.apiservice))
    });
    order
}

/// [`merge_order`] of prepared remote documents.
pub(crate) fn remote_order(remotes: &[RemoteSpec]) -> Vec<usize> {
    let keys: Vec<OrderKey<'_>> = remotes
        .iter()
        .map(|r| OrderKey {
            apiservice: &r.apiservice,
            group: &r.group,
            version: &r.version,
            group_priority_minimum: r.group_priority_minimum,
            version_priority: r.version_priority,
        })
        .collect();
    merge_order(&keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v2::PreparedV2;
    use serde_json::json;
    use std::sync::Arc;

    fn remote(name: &str, group: &str, version: &str, gpm: i32, vp: i32) -> RemoteSpec {
        RemoteSpec {
            apiservice: name.into(),
            group: group.into(),
            version: version.into(),
            group_priority_minimum: gpm,
            version_priority: vp,
            spec: Arc::new(PreparedV2::local(&json!({})).unwrap()),
        }
    }

    fn names(remotes: &[RemoteSpec]) -> Vec<&str> {
        remote_order(remotes)
            .into_iter()
            .map(|i| remotes[i].apiservice.as_str())
            .collect()
    }

    #[test]
    fn equal_priority_groups_order_by_apiservice_name() {
        let remotes = [
            remote("v2.alpha.example", "alpha.example", "v2", 100, 10),
            remote("v1.zeta.example", "zeta.example", "v1", 100, 10),
            remote("v1.high.example", "high.example", "v1", 2000, 10),
        ];
        assert_eq!(
            names(&remotes),
            ["v1.high.example", "v1.zeta.example", "v2.alpha.example"]
        );
    }

    #[test]
    fn group_priority_is_the_max_over_its_apiservices() {
        let remotes = [
            remote("v1.b.example", "b.example", "v1", 500, 10),
            remote("v1.a.example", "a.example", "v1", 100, 10),
            remote("v2.a.example", "a.example", "v2", 900, 5),
        ];
        assert_eq!(
            names(&remotes),
            ["v1.a.example", "v2.a.example", "v1.b.example"]
        );
    }

    #[test]
    fn same_group_orders_by_version_priority_then_kube_version() {
        let remotes = [
            remote("v1alpha1.g.example", "g.example", "v1alpha1", 100, 10),
            remote("v1.g.example", "g.example", "v1", 100, 10),
            remote("v1beta1.g.example", "g.example", "v1beta1", 100, 20),
            remote("v2beta1.g.example", "g.example", "v2beta1", 100, 10),
        ];
        assert_eq!(
            names(&remotes),
            [
                "v1beta1.g.example",
                "v1.g.example",
                "v2beta1.g.example",
                "v1alpha1.g.example"
            ]
        );
    }
}
