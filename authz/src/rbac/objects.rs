//! The four RBAC kinds as they arrive from a list or a watch, checked and turned into what the
//! index keeps.

use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::policy::{BindingEntry, RoleEntry};
use super::rules::Rule;

/// One of the four RBAC kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RbacKind {
    /// `Role` (namespaced).
    Role,
    /// `ClusterRole`.
    ClusterRole,
    /// `RoleBinding` (namespaced).
    RoleBinding,
    /// `ClusterRoleBinding`.
    ClusterRoleBinding,
}

impl RbacKind {
    /// The kind as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            RbacKind::Role => "Role",
            RbacKind::ClusterRole => "ClusterRole",
            RbacKind::RoleBinding => "RoleBinding",
            RbacKind::ClusterRoleBinding => "ClusterRoleBinding",
        }
    }

    /// The kind named `kind`, if it is one of the four.
    pub fn from_kind(kind: &str) -> Option<Self> {
        match kind {
            "Role" => Some(RbacKind::Role),
            "ClusterRole" => Some(RbacKind::ClusterRole),
            "RoleBinding" => Some(RbacKind::RoleBinding),
            "ClusterRoleBinding" => Some(RbacKind::ClusterRoleBinding),
            _ => None,
        }
    }

    /// Whether objects of this kind live in a namespace.
    pub fn is_namespaced(self) -> bool {
        matches!(self, RbacKind::Role | RbacKind::RoleBinding)
    }
}

impl fmt::Display for RbacKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an object could not be read or taken in.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The value is not a JSON object.
    #[error("an RBAC object must be a JSON object, got {0}")]
    NotAnObject(&'static str),
    /// No `kind` field, and none was given.
    #[error("the object has no \"kind\" field")]
    MissingKind,
    /// `kind` is none of the four RBAC kinds.
    #[error("kind {0:?} is not an RBAC kind (Role, ClusterRole, RoleBinding, ClusterRoleBinding)")]
    UnknownKind(String),
    /// The object is of another kind than the one expected.
    #[error("expected a {expected}, got a {found}")]
    WrongKind {
        /// The kind asked for.
        expected: RbacKind,
        /// The kind the object says it is.
        found: String,
    },
    /// The object does not decode as its kind (a wrong `apiVersion`, a field of the wrong type).
    #[error("{kind} does not decode: {source}")]
    Decode {
        /// The kind it was read as.
        kind: RbacKind,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
    /// No `metadata.name`.
    #[error("{kind} has no metadata.name")]
    MissingName {
        /// The kind of the object.
        kind: RbacKind,
    },
    /// A namespaced object without `metadata.namespace`.
    #[error("{kind} {name:?} has no metadata.namespace")]
    MissingNamespace {
        /// The kind of the object.
        kind: RbacKind,
        /// Its name.
        name: String,
    },
}

/// One RBAC object, typed.
#[derive(Debug, Clone, PartialEq)]
pub enum RbacObject {
    /// A Role.
    Role(Role),
    /// A ClusterRole.
    ClusterRole(ClusterRole),
    /// A RoleBinding.
    RoleBinding(RoleBinding),
    /// A ClusterRoleBinding.
    ClusterRoleBinding(ClusterRoleBinding),
}

impl RbacObject {
    /// Reads an object whose `kind` field says what it is (a watch event's object).
    pub fn from_json(value: Value) -> Result<Self, ObjectError> {
        let kind = kind_field(&value)?.ok_or(ObjectError::MissingKind)?;
        let kind =
            RbacKind::from_kind(kind).ok_or_else(|| ObjectError::UnknownKind(kind.into()))?;
        Self::from_json_as(kind, value)
    }

    /// Reads an object as `kind` (a list's items usually have no `kind`); an object whose
    /// `kind` field names another kind is refused.
    pub fn from_json_as(kind: RbacKind, value: Value) -> Result<Self, ObjectError> {
        if let Some(found) = kind_field(&value)? {
            if found != kind.as_str() {
                return Err(ObjectError::WrongKind {
                    expected: kind,
                    found: found.into(),
                });
            }
        }
        let decode = |source| ObjectError::Decode { kind, source };
        Ok(match kind {
            RbacKind::Role => RbacObject::Role(serde_json::from_value(value).map_err(decode)?),
            RbacKind::ClusterRole => {
                RbacObject::ClusterRole(serde_json::from_value(value).map_err(decode)?)
            }
            RbacKind::RoleBinding => {
                RbacObject::RoleBinding(serde_json::from_value(value).map_err(decode)?)
            }
            RbacKind::ClusterRoleBinding => {
                RbacObject::ClusterRoleBinding(serde_json::from_value(value).map_err(decode)?)
            }
        })
    }

    /// Its kind.
    pub fn kind(&self) -> RbacKind {
        match self {
            RbacObject::Role(_) => RbacKind::Role,
            RbacObject::ClusterRole(_) => RbacKind::ClusterRole,
            RbacObject::RoleBinding(_) => RbacKind::RoleBinding,
            RbacObject::ClusterRoleBinding(_) => RbacKind::ClusterRoleBinding,
        }
    }

    fn metadata(&self) -> &ObjectMeta {
        match self {
            RbacObject::Role(o) => &o.metadata,
            RbacObject::ClusterRole(o) => &o.metadata,
            RbacObject::RoleBinding(o) => &o.metadata,
            RbacObject::ClusterRoleBinding(o) => &o.metadata,
        }
    }

    /// `metadata.name`, empty when absent.
    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or("")
    }

    /// `metadata.namespace` for the namespaced kinds; empty for the cluster-wide ones.
    pub fn namespace(&self) -> &str {
        if self.kind().is_namespaced() {
            self.metadata().namespace.as_deref().unwrap_or("")
        } else {
            ""
        }
    }

    /// Checks name and namespace and turns the object into what the index keeps.
    pub(crate) fn into_entry(self) -> Result<Entry, ObjectError> {
        let kind = self.kind();
        let name = self.name();
        if name.is_empty() {
            return Err(ObjectError::MissingName { kind });
        }
        if kind.is_namespaced() && self.namespace().is_empty() {
            return Err(ObjectError::MissingNamespace {
                kind,
                name: name.into(),
            });
        }
        let name: Arc<str> = Arc::from(name);
        let namespace: Arc<str> = Arc::from(self.namespace());
        let role = |rules: Option<Vec<_>>| {
            Arc::new(RoleEntry {
                rules: rules
                    .unwrap_or_default()
                    .into_iter()
                    .map(Rule::from)
                    .collect(),
            })
        };
        Ok(match self {
            RbacObject::Role(o) => Entry::Role {
                namespace,
                name,
                role: role(o.rules),
            },
            RbacObject::ClusterRole(o) => Entry::ClusterRole {
                name,
                role: role(o.rules),
            },
            RbacObject::RoleBinding(o) => Entry::Binding(Arc::new(BindingEntry {
                name,
                namespace,
                role_kind: o.role_ref.kind,
                role_name: o.role_ref.name,
                subjects: o.subjects.unwrap_or_default().into_boxed_slice(),
            })),
            RbacObject::ClusterRoleBinding(o) => Entry::Binding(Arc::new(BindingEntry {
                name,
                namespace,
                role_kind: o.role_ref.kind,
                role_name: o.role_ref.name,
                subjects: o.subjects.unwrap_or_default().into_boxed_slice(),
            })),
        })
    }
}

/// The `kind` field, if any; an error when the value is not an object or `kind` not a string.
fn kind_field(value: &Value) -> Result<Option<&str>, ObjectError> {
    let object = match value {
        Value::Object(object) => object,
        Value::Null => return Err(ObjectError::NotAnObject("null")),
        Value::Bool(_) => return Err(ObjectError::NotAnObject("a boolean")),
        Value::Number(_) => return Err(ObjectError::NotAnObject("a number")),
        Value::String(_) => return Err(ObjectError::NotAnObject("a string")),
        Value::Array(_) => return Err(ObjectError::NotAnObject("an array")),
    };
    match object.get("kind") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(kind)) => Ok(Some(kind)),
        Some(_) => Err(ObjectError::UnknownKind("(not a string)".into())),
    }
}

impl From<Role> for RbacObject {
    fn from(object: Role) -> Self {
        RbacObject::Role(object)
    }
}

impl From<ClusterRole> for RbacObject {
    fn from(object: ClusterRole) -> Self {
        RbacObject::ClusterRole(object)
    }
}

impl From<RoleBinding> for RbacObject {
    fn from(object: RoleBinding) -> Self {
        RbacObject::RoleBinding(object)
    }
}

impl From<ClusterRoleBinding> for RbacObject {
    fn from(object: ClusterRoleBinding) -> Self {
        RbacObject::ClusterRoleBinding(object)
    }
}

/// An object as the index keeps it. A binding's namespace is empty for a ClusterRoleBinding.
#[derive(Debug)]
pub(crate) enum Entry {
    Role {
        namespace: Arc<str>,
        name: Arc<str>,
        role: Arc<RoleEntry>,
    },
    ClusterRole {
        name: Arc<str>,
        role: Arc<RoleEntry>,
    },
    Binding(Arc<BindingEntry>),
}
