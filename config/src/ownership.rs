//! Who owns a group-version. Kubernetes owns its built-in groups (whatever versions it serves now
//! or later); the delegate owns every group-version it lists in `/api` and `/apis`. An APIService
//! registered through the API never takes an owned group-version: writes are refused
//! ([`refuse_owned`]) and, at every registry build, a stored one that conflicts is kept out of the
//! routes ([`split_stored`]) with a condition saying why.
//!
//! The config FILE is the operator's: it may declare a built-in group only as a local APIService
//! (`spec.service` unset, to change its priorities); a remote one is a config error
//! ([`remote_builtin`]). A file APIService named like a delegate group-version still wins over the
//! automatic one.

use apiagg_apis::{FieldError, ValidationErrors, GROUP_PRIORITIES};

use crate::file::SourcedApiService;
use crate::registry::LocalGroupVersion;

/// Condition reason of a stored APIService for a group-version the delegate serves.
pub const CONFLICTS_WITH_DELEGATE: &str = "ConflictsWithDelegate";
/// Condition reason of a stored APIService for a built-in group of Kubernetes.
pub const BUILTIN_GROUP: &str = "BuiltinGroup";

/// Groups of Kubernetes not in kube-apiserver's priority table (removed ones, the aggregator's
/// own, and groups with kinds but no resources): owned all the same.
const OTHER_BUILTIN_GROUPS: &[&str] = &[
    "apiregistration.k8s.io",
    "extensions",
    "settings.k8s.io",
    "auditregistration.k8s.io",
    "imagepolicy.k8s.io",
    "admission.k8s.io",
    "apidiscovery.k8s.io",
    "apiserver.k8s.io",
    "apiserverinternal.k8s.io",
    "meta.k8s.io",
];

/// Whether `group` is a built-in group of Kubernetes: core (`""`), every group of
/// kube-apiserver's priority table ([`GROUP_PRIORITIES`]) and a superset of groups of other
/// versions (1.0 to 1.34). Not version-dependent: a group built into any Kubernetes version is
/// refused for every version.
pub fn is_builtin_group(group: &str) -> bool {
    group.is_empty()
        || GROUP_PRIORITIES.iter().any(|(g, _)| *g == group)
        || OTHER_BUILTIN_GROUPS.contains(&group)
}

/// The owner of a group-version, when it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// A built-in group of Kubernetes.
    Kubernetes,
    /// A group-version the delegate lists.
    Delegate,
}

/// Who owns `group`/`version`: Kubernetes first, then the delegate (`delegate`: the group-versions
/// it lists, as far as known).
pub(crate) fn owner(group: &str, version: &str, delegate: &[LocalGroupVersion]) -> Option<Owner> {
    if is_builtin_group(group) {
        return Some(Owner::Kubernetes);
    }
    delegate
        .iter()
        .any(|gv| gv.group == group && gv.version == version)
        .then_some(Owner::Delegate)
}

fn shown(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("core/{version}")
    } else {
        format!("{group}/{version}")
    }
}

/// Why an owned group-version is not for an APIService of the API: `(reason, message)`.
pub(crate) fn explain(owner: Owner, group: &str, version: &str) -> (&'static str, String) {
    let gv = shown(group, version);
    match owner {
        Owner::Kubernetes => (
            BUILTIN_GROUP,
            format!("group {group:?} is built into Kubernetes and served by the delegate: an APIService registered through the API never routes {gv}"),
        ),
        Owner::Delegate => (
            CONFLICTS_WITH_DELEGATE,
            format!("the delegate serves {gv} itself: its group-version wins, this APIService never routes"),
        ),
    }
}

/// The refusal of a create or update through the API of an APIService for an owned
/// group-version: `Invalid` (422) on `spec.group` naming the group and why.
pub fn refuse_owned(
    name: &str,
    group: &str,
    version: &str,
    delegate: &[LocalGroupVersion],
) -> Result<(), ValidationErrors> {
    let Some(owner) = owner(group, version, delegate) else {
        return Ok(());
    };
    let (field, detail) = match owner {
        Owner::Kubernetes => ("spec.group", format!("{group:?} is a built-in group of Kubernetes, served by the delegate: it cannot be registered through the API")),
        Owner::Delegate => ("spec.version", format!("the delegate serves {} itself: it cannot be registered through the API", shown(group, version))),
    };
    Err(ValidationErrors {
        name: name.to_string(),
        errors: vec![FieldError {
            field: field.into(),
            kind: "Forbidden".into(),
            detail,
        }],
    })
}

/// A stored APIService kept out of the routes, and its `Available` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Displaced {
    /// `<version>.<group>`.
    pub name: String,
    /// [`CONFLICTS_WITH_DELEGATE`] or [`BUILTIN_GROUP`].
    pub reason: &'static str,
    /// Names the owned group-version and why it does not route.
    pub message: String,
}

/// Splits APIServices registered through the API into those that may route and those an owner
/// displaces (built-in groups always; the delegate's group-versions as far as known).
pub fn split_stored(
    stored: Vec<SourcedApiService>,
    delegate: &[LocalGroupVersion],
) -> (Vec<SourcedApiService>, Vec<Displaced>) {
    let mut routable = Vec::with_capacity(stored.len());
    let mut displaced = Vec::new();
    for sourced in stored {
        let spec = sourced.object.spec.as_ref();
        let group = spec.and_then(|s| s.group.as_deref()).unwrap_or("");
        let version = spec.and_then(|s| s.version.as_deref()).unwrap_or("");
        match owner(group, version, delegate) {
            None => routable.push(sourced),
            Some(owner) => {
                let (reason, message) = explain(owner, group, version);
                let name = sourced.object.metadata.name.clone().unwrap_or_default();
                displaced.push(Displaced {
                    name,
                    reason,
                    message,
                });
            }
        }
    }
    (routable, displaced)
}

/// Whether a config-file APIService routes a built-in group to a remote Service (refused: a
/// built-in group may be declared in the file only as local).
pub(crate) fn remote_builtin(group: &str, has_service: bool) -> bool {
    has_service && is_builtin_group(group)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gv(group: &str, version: &str) -> LocalGroupVersion {
        LocalGroupVersion {
            group: group.into(),
            version: version.into(),
        }
    }

    #[test]
    fn builtin_groups_are_owned_by_kubernetes_for_every_version() {
        for group in [
            "",
            "apps",
            "rbac.authorization.k8s.io",
            "apiregistration.k8s.io",
        ] {
            assert_eq!(owner(group, "v9", &[]), Some(Owner::Kubernetes), "{group}");
        }
        assert_eq!(owner("metrics.k8s.io", "v1beta1", &[]), None);
        assert_eq!(owner("wardle.example.com", "v1", &[]), None);
    }

    #[test]
    fn delegate_group_versions_are_owned_by_the_delegate() {
        let delegate = [gv("", "v1"), gv("stable.example.com", "v1")];
        assert_eq!(
            owner("stable.example.com", "v1", &delegate),
            Some(Owner::Delegate)
        );
        assert_eq!(owner("stable.example.com", "v2", &delegate), None);
        let refused = refuse_owned("v1.", "", "v1", &delegate).expect_err("core is refused");
        assert_eq!(
            refused.to_string(),
            "APIService.apiregistration.k8s.io \"v1.\" is invalid: spec.group: Forbidden: \"\" is a built-in group of Kubernetes, served by the delegate: it cannot be registered through the API"
        );
        let refused = refuse_owned(
            "v1.stable.example.com",
            "stable.example.com",
            "v1",
            &delegate,
        )
        .expect_err("the delegate's");
        assert!(refused
            .to_string()
            .contains("the delegate serves stable.example.com/v1"));
    }

    #[test]
    fn stored_apiservices_of_owned_group_versions_are_displaced() {
        let stored = |name: &str, group: &str| {
            let object = serde_json::json!({"metadata": {"name": name},
                "spec": {"group": group, "version": "v1", "groupPriorityMinimum": 1, "versionPriority": 1,
                    "service": {"namespace": "x", "name": "y"}}});
            SourcedApiService {
                object: serde_json::from_value(object).expect("an APIService"),
                origin: "the APIService API".into(),
            }
        };
        let all = vec![
            stored("v1.", ""),
            stored("v1.a.io", "a.io"),
            stored("v1.b.io", "b.io"),
        ];
        let (routable, displaced) = split_stored(all, &[gv("b.io", "v1")]);
        let names: Vec<_> = routable
            .iter()
            .map(|s| s.object.metadata.name.clone())
            .collect();
        assert_eq!(names, [Some("v1.a.io".to_string())]);
        let reasons: Vec<_> = displaced
            .iter()
            .map(|d| (d.name.as_str(), d.reason))
            .collect();
        assert_eq!(
            reasons,
            [("v1.", BUILTIN_GROUP), ("v1.b.io", CONFLICTS_WITH_DELEGATE)]
        );
        assert_eq!(
            displaced[1].message,
            "the delegate serves b.io/v1 itself: its group-version wins, this APIService never routes"
        );
    }
}
