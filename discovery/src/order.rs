//! Legacy `/apis` and `/apis/<group>` built from APIService records (kube-aggregator's
//! `pkg/apiserver/handler_apis.go`, ordered as `pkg/apis/apiregistration/v1/helper/helpers.go`).

use std::collections::HashMap;

use apiagg_apis::{compare_apiservices, compare_versions};

use crate::types::{APIGroup, APIGroupList, GroupVersionForDiscovery, LEGACY_API_VERSION};

/// The group the aggregator itself serves; always listed first.
pub const APIREGISTRATION_GROUP: &str = "apiregistration.k8s.io";

/// What legacy ordering needs from one APIService (`<version>.<group>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiServiceRecord<'a> {
    /// APIService name, e.g. `v1beta1.metrics.k8s.io` (the tie-break between groups).
    pub name: &'a str,
    /// `spec.group` (empty for the legacy core group, which is skipped).
    pub group: &'a str,
    /// `spec.version`.
    pub version: &'a str,
    /// `spec.groupPriorityMinimum`.
    pub group_priority_minimum: i32,
    /// `spec.versionPriority`.
    pub version_priority: i32,
}

/// Groups the records in legacy order: records sorted by `groupPriorityMinimum` descending then
/// name ascending, a group placed where it first appears, versions by
/// [`compare_versions`]. Records of the core group and of `apiregistration.k8s.io` are left out.
pub fn legacy_group_order<'a>(
    records: &[ApiServiceRecord<'a>],
) -> Vec<(&'a str, Vec<ApiServiceRecord<'a>>)> {
    let mut sorted: Vec<&ApiServiceRecord<'a>> = records
        .iter()
        .filter(|r| !r.group.is_empty() && r.group != APIREGISTRATION_GROUP)
        .collect();
    sorted.sort_by(|a, b| {
        compare_apiservices(
            (a.group_priority_minimum, a.name),
            (b.group_priority_minimum, b.name),
        )
    });

    let mut slots: HashMap<&str, usize> = HashMap::new();
    let mut groups: Vec<(&'a str, Vec<ApiServiceRecord<'a>>)> = Vec::new();
    for r in sorted {
        match slots.get(r.group) {
            Some(&i) => {
                if let Some((_, members)) = groups.get_mut(i) {
                    members.push(*r);
                }
            }
            None => {
                slots.insert(r.group, groups.len());
                groups.push((r.group, vec![*r]));
            }
        }
    }
    for (_, members) in &mut groups {
        sort_versions(members);
    }
    groups
}

/// Sorts one group's records by `versionPriority` descending, then kube-aware version.
fn sort_versions(members: &mut [ApiServiceRecord<'_>]) {
    members.sort_by(|a, b| {
        compare_versions(
            (a.version, a.version_priority),
            (b.version, b.version_priority),
        )
    });
}

/// The fixed `apiregistration.k8s.io` entry (`v1` only).
pub fn apiregistration_group() -> APIGroup {
    group_entry(APIREGISTRATION_GROUP, &["v1"])
}

/// `/apis` as `APIGroupList`: `apiregistration.k8s.io` first, then every group of `records`
/// in legacy order. Availability does not matter.
pub fn legacy_group_list(records: &[ApiServiceRecord<'_>]) -> APIGroupList {
    let mut groups = vec![apiregistration_group()];
    groups.extend(
        legacy_group_order(records)
            .into_iter()
            .map(|(name, members)| {
                let versions: Vec<&str> = members.iter().map(|r| r.version).collect();
                group_entry(name, &versions)
            }),
    );
    APIGroupList {
        kind: Some("APIGroupList".to_owned()),
        api_version: Some(LEGACY_API_VERSION.to_owned()),
        groups,
        ..APIGroupList::default()
    }
}

/// `/apis/<group>` as a standalone `APIGroup`, or `None` when no record has that group.
/// `apiregistration.k8s.io` always answers with its fixed entry.
pub fn legacy_group(records: &[ApiServiceRecord<'_>], group: &str) -> Option<APIGroup> {
    let mut entry = if group == APIREGISTRATION_GROUP {
        apiregistration_group()
    } else {
        let mut members: Vec<ApiServiceRecord<'_>> = records
            .iter()
            .filter(|r| r.group == group && !group.is_empty())
            .copied()
            .collect();
        if members.is_empty() {
            return None;
        }
        sort_versions(&mut members);
        let versions: Vec<&str> = members.iter().map(|r| r.version).collect();
        group_entry(group, &versions)
    };
    entry.kind = Some("APIGroup".to_owned());
    entry.api_version = Some(LEGACY_API_VERSION.to_owned());
    Some(entry)
}

fn group_entry(name: &str, versions: &[&str]) -> APIGroup {
    let versions: Vec<GroupVersionForDiscovery> = versions
        .iter()
        .map(|v| GroupVersionForDiscovery::new(name, v))
        .collect();
    APIGroup {
        name: name.to_owned(),
        preferred_version: versions.first().cloned(),
        versions,
        ..APIGroup::default()
    }
}
