//! Priorities kube-apiserver gives the APIServices it registers for its built-in groups.

/// kube-apiserver's `groupPriorityMinimum` of its built-in groups (core `""` is 18000), the
/// table [`builtin_priority`] reads (and `apiagg-config` for the groups it keeps for Kubernetes).
/// As kube-apiserver v1.37 (`pkg/controlplane/apiserver/aggregator.go`
/// `DefaultGenericAPIServicePriorities`, merged with `cmd/kube-apiserver/app/aggregator.go`),
/// highest first; discovery lists groups in this order (ties by APIService name).
pub const GROUP_PRIORITIES: &[(&str, i32)] = &[
    ("apps", 17800),
    ("events.k8s.io", 17750),
    ("authentication.k8s.io", 17700),
    ("authorization.k8s.io", 17600),
    ("autoscaling", 17500),
    ("batch", 17400),
    ("certificates.k8s.io", 17300),
    ("networking.k8s.io", 17200),
    ("policy", 17100),
    ("rbac.authorization.k8s.io", 17000),
    ("storage.k8s.io", 16800),
    ("apiextensions.k8s.io", 16700),
    ("admissionregistration.k8s.io", 16700),
    ("scheduling.k8s.io", 16600),
    ("coordination.k8s.io", 16500),
    ("node.k8s.io", 16300),
    ("discovery.k8s.io", 16200),
    ("resource.k8s.io", 16200),
    ("flowcontrol.apiserver.k8s.io", 16100),
    ("internal.apiserver.k8s.io", 16000),
    ("storagemigration.k8s.io", 15800),
    ("lifecycle.k8s.io", 15700),
];

/// kube-apiserver's `versionPriority` of the built-in group-versions it names (same sources as
/// [`GROUP_PRIORITIES`]); a version of a built-in group it does not name gets 15 for `v1`, 9
/// for a beta and 1 otherwise.
const VERSION_PRIORITIES: &[(&str, &str, i32)] = &[
    ("events.k8s.io", "v1beta1", 5),
    ("authentication.k8s.io", "v1alpha1", 1),
    ("autoscaling", "v2", 30),
    ("autoscaling", "v2beta1", 9),
    ("autoscaling", "v2beta2", 1),
    ("batch", "v2alpha1", 9),
    ("certificates.k8s.io", "v1alpha1", 1),
    ("storage.k8s.io", "v1alpha1", 1),
    ("admissionregistration.k8s.io", "v1beta1", 12),
    ("admissionregistration.k8s.io", "v1alpha1", 9),
    ("scheduling.k8s.io", "v1alpha3", 3),
    ("coordination.k8s.io", "v1beta1", 13),
    ("coordination.k8s.io", "v1alpha2", 12),
    ("node.k8s.io", "v1alpha1", 1),
    ("discovery.k8s.io", "v1beta1", 12),
    ("resource.k8s.io", "v1", 21),
    ("resource.k8s.io", "v1beta2", 15),
    ("resource.k8s.io", "v1beta1", 9),
    ("resource.k8s.io", "v1alpha3", 1),
    ("flowcontrol.apiserver.k8s.io", "v1", 21),
    ("flowcontrol.apiserver.k8s.io", "v1beta3", 18),
    ("flowcontrol.apiserver.k8s.io", "v1beta2", 15),
    ("flowcontrol.apiserver.k8s.io", "v1beta1", 12),
    ("flowcontrol.apiserver.k8s.io", "v1alpha1", 9),
    ("internal.apiserver.k8s.io", "v1alpha1", 9),
    ("lifecycle.k8s.io", "v1alpha1", 1),
];

fn group_priority(group: &str) -> Option<i32> {
    GROUP_PRIORITIES
        .iter()
        .find(|(g, _)| *g == group)
        .map(|(_, p)| *p)
}

/// `(groupPriorityMinimum, versionPriority)` for a group-version served by the delegate: the
/// kube-apiserver table for built-in groups, `(1000, 100)` (the CRD default) for anything else.
pub fn builtin_priority(group: &str, version: &str) -> (i32, i32) {
    if group.is_empty() {
        return (18000, 1);
    }
    let Some(group_priority) = group_priority(group) else {
        return (1000, 100);
    };
    let named = VERSION_PRIORITIES
        .iter()
        .find(|(g, v, _)| *g == group && *v == version);
    let version_priority = match named {
        Some((_, _, priority)) => *priority,
        None if version == "v1" => 15,
        None if version.contains("beta") => 9,
        None => 1,
    };
    (group_priority, version_priority)
}

#[cfg(test)]
mod tests {
    use super::builtin_priority;

    #[test]
    fn table_entries() {
        assert_eq!(builtin_priority("", "v1"), (18000, 1));
        assert_eq!(builtin_priority("apps", "v1"), (17800, 15));
        assert_eq!(builtin_priority("autoscaling", "v2"), (17500, 30));
        assert_eq!(builtin_priority("batch", "v1"), (17400, 15));
        assert_eq!(
            builtin_priority("flowcontrol.apiserver.k8s.io", "v1"),
            (16100, 21)
        );
        assert_eq!(builtin_priority("storage.k8s.io", "v1alpha1"), (16800, 1));
        // kube-apiserver 1.37 (the real_kube:: discovery rows compare the order).
        assert_eq!(builtin_priority("resource.k8s.io", "v1"), (16200, 21));
        assert_eq!(builtin_priority("resource.k8s.io", "v1beta2"), (16200, 15));
        assert_eq!(builtin_priority("resource.k8s.io", "v1alpha3"), (16200, 1));
        assert_eq!(
            builtin_priority("scheduling.k8s.io", "v1alpha3"),
            (16600, 3)
        );
        assert_eq!(
            builtin_priority("storagemigration.k8s.io", "v1beta1"),
            (15800, 9)
        );
        assert_eq!(builtin_priority("lifecycle.k8s.io", "v1alpha1"), (15700, 1));
        assert_eq!(
            builtin_priority("internal.apiserver.k8s.io", "v1alpha1"),
            (16000, 9)
        );
        assert_eq!(builtin_priority("stable.example.com", "v1"), (1000, 100));
    }
}
