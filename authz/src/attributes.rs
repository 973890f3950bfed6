//! What an authorizer decides on: who asks ([`Subject`]), what they ask to do
//! ([`Attributes`], k8s.io/apiserver's `authorizer.AttributesRecord`), and its answer
//! ([`Decision`]).

/// Who asks: the authenticated (or impersonated) user, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// User name.
    pub name: &'a str,
    /// UID, empty when unknown.
    pub uid: &'a str,
    /// Groups, in order.
    pub groups: &'a [String],
    /// Extra attributes, keys in order.
    pub extra: &'a [(String, Vec<String>)],
}

/// The operator of a selector requirement, as the SubjectAccessReview spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `In`: the value is one of `values`.
    In,
    /// `NotIn`: the value is none of `values`.
    NotIn,
    /// `Exists` (labels only).
    Exists,
    /// `DoesNotExist` (labels only).
    DoesNotExist,
}

impl Operator {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
        }
    }
}

/// One requirement of a field or label selector (KEP-4601).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The field or label key.
    pub key: String,
    /// How it is compared.
    pub operator: Operator,
    /// The values (empty for `Exists` and `DoesNotExist`).
    pub values: Vec<String>,
}

/// What a request asks to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, … (resource) or the lower-case method (non-resource).
    pub verb: String,
    /// A resource request (`resourceAttributes`) or not (`nonResourceAttributes`).
    pub resource_request: bool,
    /// The decoded path (non-resource requests).
    pub path: String,
    /// Namespace (resource requests).
    pub namespace: String,
    /// API group, empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource.
    pub resource: String,
    /// Subresource.
    pub subresource: String,
    /// Object name.
    pub name: String,
    /// The field selector's requirements (list, watch and deletecollection), `None` when the
    /// request has none or it cannot be read.
    pub field_selector: Option<Vec<Requirement>>,
    /// The label selector's requirements, as for `field_selector`.
    pub label_selector: Option<Vec<Requirement>>,
}

/// An authorizer's answer (k8s.io/apiserver's `authorizer.Decision`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed: the chain stops here.
    Allow(String),
    /// Denied: the chain stops here.
    Deny(String),
    /// No opinion: the next authorizer decides (at the end of the chain, a denial).
    NoOpinion(String),
}

impl Decision {
    /// The reason given with it.
    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow(r) | Decision::Deny(r) | Decision::NoOpinion(r) => r,
        }
    }

    /// The reason given with it, taken.
    pub fn into_reason(self) -> String {
        match self {
            Decision::Allow(r) | Decision::Deny(r) | Decision::NoOpinion(r) => r,
        }
    }

    /// Whether it allows.
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }
}
