//! Who a binding's subject is (upstream's `appliesToUser`), the index key it is filed under, and
//! how a grant is described.
//!
//! - `User`: the user's name equals the subject's name (the subject's `apiGroup` is not read);
//! - `Group`: one of the user's groups equals the subject's name;
//! - `ServiceAccount`: the user's name is `system:serviceaccount:<namespace>:<name>`, where an
//!   empty subject namespace means the binding's namespace; in a ClusterRoleBinding (no
//!   namespace) such a subject matches nobody;
//! - any other kind matches nobody.
//!
//! A `User` subject named `system:serviceaccount:ns:sa` therefore matches that service account
//! exactly as a `ServiceAccount` subject does: both compare the user's name with one string, so
//! both are filed under that name in the index.

use k8s_openapi::api::rbac::v1::Subject as RbacSubject;

use super::policy::BindingEntry;
use crate::attributes::Subject;

/// The user-name prefix of service accounts.
pub(crate) const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// The index a subject is filed under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SubjectKey {
    /// Matches the user whose name is this.
    UserName(String),
    /// Matches the users in this group.
    Group(String),
}

/// The key `subject` is filed under in a binding of `binding_namespace` (empty for a
/// ClusterRoleBinding); `None` for a subject that matches nobody.
pub(crate) fn subject_key(subject: &RbacSubject, binding_namespace: &str) -> Option<SubjectKey> {
    match subject.kind.as_str() {
        "User" => Some(SubjectKey::UserName(subject.name.clone())),
        "Group" => Some(SubjectKey::Group(subject.name.clone())),
        "ServiceAccount" => {
            let namespace = service_account_namespace(subject, binding_namespace)?;
            Some(SubjectKey::UserName(format!(
                "{SERVICE_ACCOUNT_PREFIX}{namespace}:{}",
                subject.name
            )))
        }
        _ => None,
    }
}

/// Whether `subject`, in a binding of `binding_namespace`, names `user`.
pub(crate) fn subject_applies(
    subject: &RbacSubject,
    user: &Subject<'_>,
    binding_namespace: &str,
) -> bool {
    match subject.kind.as_str() {
        "User" => user.name == subject.name,
        "Group" => user.groups.contains(&subject.name),
        "ServiceAccount" => match service_account_namespace(subject, binding_namespace) {
            Some(namespace) => user
                .name
                .strip_prefix(SERVICE_ACCOUNT_PREFIX)
                .and_then(|rest| rest.strip_prefix(namespace))
                .and_then(|rest| rest.strip_prefix(':'))
                .is_some_and(|rest| rest == subject.name),
            None => false,
        },
        _ => false,
    }
}

/// A ServiceAccount subject's namespace, defaulting to the binding's; `None` when both are empty.
fn service_account_namespace<'a>(
    subject: &'a RbacSubject,
    binding_namespace: &'a str,
) -> Option<&'a str> {
    let namespace = match subject.namespace.as_deref() {
        Some(namespace) if !namespace.is_empty() => namespace,
        _ => binding_namespace,
    };
    (!namespace.is_empty()).then_some(namespace)
}

/// The index of the first subject of `binding` that names `user`, as upstream reports it.
pub(crate) fn first_applying_subject(binding: &BindingEntry, user: &Subject<'_>) -> Option<usize> {
    binding
        .subjects
        .iter()
        .position(|subject| subject_applies(subject, user, &binding.namespace))
}

/// Upstream's reason for an allowed request, e.g. `RBAC: allowed by ClusterRoleBinding "x" of
/// ClusterRole "y" to Group "z"` or `… RoleBinding "x/ns" of Role "y" to ServiceAccount
/// "sa/ns"` (names quoted; a namespaced binding and a service account written
/// `name/namespace`). Built in one allocation: it is made on every allowed request.
pub(crate) fn allow_reason(binding: &BindingEntry, subject: &RbacSubject) -> String {
    let mut reason = String::with_capacity(128);
    reason.push_str("RBAC: allowed by ");
    if binding.namespace.is_empty() {
        reason.push_str("ClusterRoleBinding ");
        push_quoted(&mut reason, &[&binding.name]);
    } else {
        reason.push_str("RoleBinding ");
        push_quoted(&mut reason, &[&binding.name, "/", &binding.namespace]);
    }
    reason.push_str(" of ");
    reason.push_str(&binding.role_kind);
    reason.push(' ');
    push_quoted(&mut reason, &[&binding.role_name]);
    reason.push_str(" to ");
    reason.push_str(&subject.kind);
    reason.push(' ');
    if subject.kind == "ServiceAccount" {
        let namespace = match subject.namespace.as_deref() {
            Some(namespace) if !namespace.is_empty() => namespace,
            _ => &binding.namespace,
        };
        push_quoted(&mut reason, &[&subject.name, "/", namespace]);
    } else {
        push_quoted(&mut reason, &[&subject.name]);
    }
    reason
}

/// Appends the concatenation of `parts` in double quotes, escaped as Rust's `Debug` escapes
/// (printable ASCII other than `"` and `\` is copied as is, as Go's `%q` also does).
fn push_quoted(out: &mut String, parts: &[&str]) {
    let plain = |text: &str| {
        text.bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
    };
    if parts.iter().all(|part| plain(part)) {
        out.push('"');
        for part in parts {
            out.push_str(part);
        }
        out.push('"');
    } else {
        out.push_str(&format!("{:?}", parts.concat()));
    }
}
