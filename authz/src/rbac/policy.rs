//! The published, immutable policy and the decision on one request.

use std::sync::Arc;

use k8s_openapi::api::rbac::v1::Subject as RbacSubject;

use super::rules::Rule;
use super::sharded::ShardedMap;
use super::subjects::{allow_reason, first_applying_subject};
use crate::attributes::{Attributes, Decision, Subject};

/// The rules of a Role or ClusterRole.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RoleEntry {
    pub(crate) rules: Box<[Rule]>,
}

/// A RoleBinding (namespace set) or ClusterRoleBinding (namespace empty).
#[derive(Debug, PartialEq)]
pub(crate) struct BindingEntry {
    pub(crate) name: Arc<str>,
    pub(crate) namespace: Arc<str>,
    pub(crate) role_kind: String,
    pub(crate) role_name: String,
    pub(crate) subjects: Box<[RbacSubject]>,
}

/// A binding filed under one of its subjects (`subject` is that subject's index).
#[derive(Debug, Clone)]
pub(crate) struct Posting {
    pub(crate) binding: Arc<BindingEntry>,
    pub(crate) subject: usize,
}

/// Postings under one key, ordered by binding name, then subject index.
pub(crate) type Postings = Arc<Vec<Posting>>;

/// The roles and bindings of the cluster scope (ClusterRoles, ClusterRoleBindings) or of one
/// namespace (Roles, RoleBindings), with the bindings indexed by subject.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    pub(crate) roles: ShardedMap<Arc<RoleEntry>>,
    pub(crate) bindings: ShardedMap<Arc<BindingEntry>>,
    /// Bindings by the user name a subject matches (User and ServiceAccount subjects).
    pub(crate) by_user: ShardedMap<Postings>,
    /// Bindings by group name.
    pub(crate) by_group: ShardedMap<Postings>,
}

impl Scope {
    pub(crate) fn is_empty(&self) -> bool {
        self.roles.is_empty() && self.bindings.is_empty()
    }
}

/// The cluster's RBAC objects, indexed for decisions: bindings by subject, roles by name.
/// Immutable once published; [`PolicyBuilder`](super::PolicyBuilder) makes the next one, sharing
/// what did not change. A decision looks up the user's name and each of the user's groups in the
/// cluster scope and in the request's namespace, never scanning every binding.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub(crate) cluster: Scope,
    pub(crate) namespaces: ShardedMap<Arc<Scope>>,
}

/// How many objects a [`Policy`] holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyCounts {
    /// Roles, all namespaces.
    pub roles: usize,
    /// ClusterRoles.
    pub cluster_roles: usize,
    /// RoleBindings, all namespaces.
    pub role_bindings: usize,
    /// ClusterRoleBindings.
    pub cluster_role_bindings: usize,
}

/// A binding whose role cannot be had. Rules only add permissions, so such a binding grants
/// nothing and the others still count; the errors are reported with a decision of no opinion.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolutionError {
    /// The Role is not in the binding's namespace (or a ClusterRoleBinding names a Role).
    #[error("role.rbac.authorization.k8s.io {name:?} not found")]
    RoleNotFound {
        /// The binding's namespace (empty for a ClusterRoleBinding).
        namespace: String,
        /// The Role's name.
        name: String,
    },
    /// No ClusterRole of that name.
    #[error("clusterrole.rbac.authorization.k8s.io {name:?} not found")]
    ClusterRoleNotFound {
        /// The ClusterRole's name.
        name: String,
    },
    /// `roleRef.kind` is neither `Role` nor `ClusterRole`.
    #[error("unsupported role reference kind: {kind:?}")]
    UnsupportedKind {
        /// The kind named.
        kind: String,
    },
}

impl Policy {
    /// An empty policy: every decision is no opinion.
    pub fn new() -> Self {
        Policy::default()
    }

    /// How many objects of each kind it holds.
    pub fn counts(&self) -> PolicyCounts {
        let mut counts = PolicyCounts {
            cluster_roles: self.cluster.roles.len(),
            cluster_role_bindings: self.cluster.bindings.len(),
            ..PolicyCounts::default()
        };
        for (_, scope) in self.namespaces.iter() {
            counts.roles += scope.roles.len();
            counts.role_bindings += scope.bindings.len();
        }
        counts
    }

    /// The decision on `request` by `user`, as kube-apiserver's RBAC authorizer makes it:
    /// allowed by the first rule found that covers the request, else no opinion, with the
    /// bindings whose role could not be had listed in the reason. RBAC never denies.
    pub fn authorize(&self, user: &Subject<'_>, request: &Attributes) -> Decision {
        let mut errors = Vec::new();
        if let Some(reason) = self.find_grant(&self.cluster, user, request, &mut errors) {
            return Decision::Allow(reason);
        }
        if applies_in_namespace(request) {
            if let Some(scope) = self.namespaces.get(&request.namespace) {
                if let Some(reason) = self.find_grant(scope, user, request, &mut errors) {
                    return Decision::Allow(reason);
                }
            }
        }
        Decision::NoOpinion(no_opinion_reason(&errors))
    }

    /// The first grant in `scope` covering the request, described; resolution errors met on
    /// the way are added to `errors`.
    fn find_grant(
        &self,
        scope: &Scope,
        user: &Subject<'_>,
        request: &Attributes,
        errors: &mut Vec<ResolutionError>,
    ) -> Option<String> {
        let by_user = scope.by_user.get(user.name);
        let by_group = user.groups.iter().filter_map(|g| scope.by_group.get(g));
        for postings in by_user.into_iter().chain(by_group) {
            for posting in postings.iter() {
                let binding = &*posting.binding;
                // A binding is filed once per subject: visit it only under its first subject
                // that names the user (the one upstream reports).
                if first_applying_subject(binding, user) != Some(posting.subject) {
                    continue;
                }
                match self.role_of(binding, scope) {
                    Ok(role) if role.rules.iter().any(|rule| rule.allows(request)) => {
                        return Some(allow_reason(binding, &binding.subjects[posting.subject]));
                    }
                    Ok(_) => {}
                    Err(error) => errors.push(error),
                }
            }
        }
        None
    }

    /// The role `binding` refers to; `scope` is the binding's own scope.
    pub(crate) fn role_of<'p>(
        &'p self,
        binding: &BindingEntry,
        scope: &'p Scope,
    ) -> Result<&'p RoleEntry, ResolutionError> {
        match binding.role_kind.as_str() {
            "ClusterRole" => self
                .cluster
                .roles
                .get(&binding.role_name)
                .map(|r| &**r)
                .ok_or_else(|| ResolutionError::ClusterRoleNotFound {
                    name: binding.role_name.clone(),
                }),
            "Role" => {
                let found = if binding.namespace.is_empty() {
                    None
                } else {
                    scope.roles.get(&binding.role_name)
                };
                found
                    .map(|r| &**r)
                    .ok_or_else(|| ResolutionError::RoleNotFound {
                        namespace: binding.namespace.to_string(),
                        name: binding.role_name.clone(),
                    })
            }
            other => Err(ResolutionError::UnsupportedKind {
                kind: other.to_string(),
            }),
        }
    }
}

/// Whether the request's namespace's RoleBindings are consulted: for resource requests in a
/// namespace. (Upstream reads the namespace whatever the request, but never receives one on a
/// non-resource request; here a caller could set one, and RoleBindings still do not apply.)
fn applies_in_namespace(request: &Attributes) -> bool {
    request.resource_request && !request.namespace.is_empty()
}

/// Upstream's reason for no opinion: empty without errors, else `RBAC: ` and the errors as
/// apimachinery aggregates them (duplicates dropped, several written `[a, b]`).
fn no_opinion_reason(errors: &[ResolutionError]) -> String {
    let mut messages: Vec<String> = Vec::new();
    for error in errors {
        let message = error.to_string();
        if !messages.contains(&message) {
            messages.push(message);
        }
    }
    match messages.len() {
        0 => String::new(),
        1 => format!("RBAC: {}", messages[0]),
        _ => format!("RBAC: [{}]", messages.join(", ")),
    }
}

/// The subjects allowed to make `request`, as upstream's `SubjectAccessEvaluator`: the group
/// `system:masters` first, then every subject of each ClusterRoleBinding, and of each
/// RoleBinding of the request's namespace, whose role covers the request (bindings in name
/// order, duplicates dropped).
pub fn allowed_subjects(policy: &Policy, request: &Attributes) -> Vec<RbacSubject> {
    allowed_subjects_with_errors(policy, request).0
}

/// [`allowed_subjects`] with the bindings whose role could not be had.
pub fn allowed_subjects_with_errors(
    policy: &Policy,
    request: &Attributes,
) -> (Vec<RbacSubject>, Vec<ResolutionError>) {
    let mut subjects = vec![RbacSubject {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "Group".into(),
        name: "system:masters".into(),
        namespace: None,
    }];
    let mut errors = Vec::new();
    let mut collect = |scope: &Scope| {
        let mut bindings: Vec<&Arc<BindingEntry>> = scope.bindings.iter().map(|(_, b)| b).collect();
        bindings.sort_by(|a, b| a.name.cmp(&b.name));
        for binding in bindings {
            match policy.role_of(binding, scope) {
                Ok(role) if role.rules.iter().any(|rule| rule.allows(request)) => {
                    for subject in binding.subjects.iter() {
                        if !subjects.contains(subject) {
                            subjects.push(subject.clone());
                        }
                    }
                }
                Ok(_) => {}
                Err(error) => errors.push(error),
            }
        }
    };
    collect(&policy.cluster);
    if applies_in_namespace(request) {
        if let Some(scope) = policy.namespaces.get(&request.namespace) {
            collect(scope);
        }
    }
    (subjects, errors)
}

/// Whether some binding of `policy` allows `request` to `user`, found by scanning every binding
/// as upstream does (tests compare the index with it).
#[cfg(test)]
pub(crate) fn scan_allows(policy: &Policy, user: &Subject<'_>, request: &Attributes) -> bool {
    let scope_allows = |scope: &Scope| {
        scope.bindings.iter().any(|(_, binding)| {
            first_applying_subject(binding, user).is_some()
                && policy
                    .role_of(binding, scope)
                    .is_ok_and(|role| role.rules.iter().any(|rule| rule.allows(request)))
        })
    };
    scope_allows(&policy.cluster)
        || (applies_in_namespace(request)
            && policy
                .namespaces
                .get(&request.namespace)
                .is_some_and(|scope| scope_allows(scope)))
}
