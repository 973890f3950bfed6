//! RBAC decided inside the gateway from the cluster's Roles, ClusterRoles, RoleBindings and
//! ClusterRoleBindings, with the decisions of kube-apiserver's RBAC authorizer
//! (`plugin/pkg/auth/authorizer/rbac`):
//!
//! - a ClusterRoleBinding grants its role's rules everywhere; a RoleBinding only for resource
//!   requests in its own namespace, whether it refers to a Role of that namespace or to a
//!   ClusterRole;
//! - a `User` subject matches the user's name, a `Group` one of the user's groups, a
//!   `ServiceAccount` the name `system:serviceaccount:<ns>:<name>` (its namespace defaulting to a
//!   RoleBinding's own); rules match as [`rule_allows`] says;
//! - the answer is [`Decision::Allow`] with the grant that allowed it, or
//!   [`Decision::NoOpinion`] listing the bindings whose role is missing: RBAC never denies, and
//!   a missing role only disables its own binding.
//!
//! The writer feeds objects to a [`PolicyBuilder`] and publishes its [`Policy`] snapshots
//! (e.g. in an `ArcSwap`); a decision reads one snapshot, looking bindings up by the user's
//! name and groups instead of scanning them all.
//!
//! [`Decision::Allow`]: crate::Decision::Allow
//! [`Decision::NoOpinion`]: crate::Decision::NoOpinion

mod builder;
mod objects;
mod policy;
mod rules;
mod sharded;
mod subjects;

#[cfg(test)]
mod tests;

pub use builder::PolicyBuilder;
pub use k8s_openapi::api::rbac::v1::Subject as RbacSubject;
pub use objects::{ObjectError, RbacKind, RbacObject};
pub use policy::{
    allowed_subjects, allowed_subjects_with_errors, Policy, PolicyCounts, ResolutionError,
};
pub use rules::rule_allows;
