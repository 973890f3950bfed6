//! Priorities kube-apiserver gives the APIServices it registers for its built-in groups.

/// kube-apiserver's `groupPriorityMinimum` of its built-in groups (core `""` is 18000), the
/// table [`builtin_priority`] reads (and `apiagg-config` for the groups it keeps for Kubernetes).
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
    ("flowcontrol.apiserver.k8s.io", 16100),
    ("internal.apiserver.k8s.io", 16000),
    ("resource.k8s.io", 15900),
    ("storagemigration.k8s.io", 15800),
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
    let version_priority = match (group, version) {
        ("autoscaling", "v2") => 30,
        ("autoscaling", "v2beta1") => 9,
        ("autoscaling", "v2beta2") => 1,
        ("flowcontrol.apiserver.k8s.io", "v1") => 21,
        ("flowcontrol.apiserver.k8s.io", "v1beta3") => 18,
        ("flowcontrol.apiserver.k8s.io", "v1beta2") => 15,
        ("events.k8s.io", "v1beta1") => 5,
        ("coordination.k8s.io", "v1beta1") => 13,
        ("coordination.k8s.io", "v1alpha2") => 12,
        ("admissionregistration.k8s.io", "v1beta1") | ("discovery.k8s.io", "v1beta1") => 12,
        ("flowcontrol.apiserver.k8s.io", "v1beta1") => 12,
        (_, "v1") => 15,
        (_, v) if v.contains("beta") => 9,
        ("admissionregistration.k8s.io", "v1alpha1")
        | ("flowcontrol.apiserver.k8s.io", "v1alpha1")
        | ("internal.apiserver.k8s.io", "v1alpha1")
        | ("resource.k8s.io", _)
        | ("storagemigration.k8s.io", _) => 9,
        _ => 1,
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
        assert_eq!(builtin_priority("stable.example.com", "v1"), (1000, 100));
    }
}
