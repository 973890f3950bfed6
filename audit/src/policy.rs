//! The audit policy: an `audit.k8s.io/v1` `Policy` file, read and checked as kube-apiserver's
//! `--audit-policy-file` is (`policy/reader.go`, `apis/audit/validation`), and evaluated as its
//! `policyRuleEvaluator` does: the first rule that matches decides the level, the stages to omit
//! (the rule's and the policy's together) and whether managed fields are dropped; no matching
//! rule means `None`. Evaluation compares strings and allocates nothing.

use std::path::{Path, PathBuf};

use apiagg_requestinfo::RequestInfo;

mod file;

pub use file::Problem;

/// How much of a request the events record (each level includes the ones before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Nothing: the request is not audited.
    None,
    /// Who asked what and the answer's status; no bodies.
    Metadata,
    /// Metadata and the request body.
    Request,
    /// Metadata, the request body and the response body.
    RequestResponse,
}

impl Level {
    /// Every level, lowest first.
    pub const ALL: [Level; 4] = [
        Level::None,
        Level::Metadata,
        Level::Request,
        Level::RequestResponse,
    ];

    /// The name used in policies and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }

    fn parse(text: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.as_str() == text)
    }
}

/// A point in a request's life at which an event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// As soon as the request is authenticated, before anything else happens to it.
    RequestReceived,
    /// When the response headers are sent, for long-running requests (watch, exec, proxy…).
    ResponseStarted,
    /// When the response is complete.
    ResponseComplete,
    /// When handling the request failed unexpectedly.
    Panic,
}

impl Stage {
    /// Every stage.
    pub const ALL: [Stage; 4] = [
        Stage::RequestReceived,
        Stage::ResponseStarted,
        Stage::ResponseComplete,
        Stage::Panic,
    ];

    /// The name used in policies and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }

    fn parse(text: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.as_str() == text)
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of stages for which no event is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OmitStages(u8);

impl OmitStages {
    /// No stage omitted.
    pub const NONE: OmitStages = OmitStages(0);

    /// Whether `stage` is omitted.
    pub fn contains(self, stage: Stage) -> bool {
        self.0 & stage.bit() != 0
    }

    /// This set with `stage` added.
    pub fn with(self, stage: Stage) -> OmitStages {
        OmitStages(self.0 | stage.bit())
    }

    /// Both sets together.
    pub fn union(self, other: OmitStages) -> OmitStages {
        OmitStages(self.0 | other.0)
    }
}

/// What the policy decides for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The level.
    pub level: Level,
    /// Stages not written.
    pub omit_stages: OmitStages,
    /// Whether `metadata.managedFields` is dropped from the recorded bodies.
    pub omit_managed_fields: bool,
}

/// What a policy is evaluated against: the authenticated user and the parsed request.
#[derive(Debug, Clone, Copy)]
pub struct Attributes<'a> {
    /// User name.
    pub user: &'a str,
    /// The user's groups.
    pub groups: &'a [String],
    /// The request.
    pub info: &'a RequestInfo<'a>,
}

/// Why a policy file cannot be used. Not retryable: the file must change.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file cannot be read.
    #[error("audit policy file {path:?}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The read error.
        source: std::io::Error,
    },
    /// The file is not a policy: YAML or JSON syntax, wrong types, `apiVersion`/`kind`.
    #[error("audit policy file {path:?}: {message}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line and column when known.
        message: String,
    },
    /// The policy breaks the rules of `audit.k8s.io/v1` (the messages of kube-apiserver's
    /// validation, with the field path).
    #[error("audit policy file {path:?}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem found.
        message: String,
    },
}

/// A checked policy, ready to evaluate.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Vec<Rule>,
    omit_stages: OmitStages,
    omit_managed_fields: bool,
}

#[derive(Debug, Clone)]
struct Rule {
    level: Level,
    users: Vec<String>,
    user_groups: Vec<String>,
    verbs: Vec<String>,
    resources: Vec<GroupResources>,
    namespaces: Vec<String>,
    non_resource_urls: Vec<UrlPattern>,
    /// The rule's stages and the policy's.
    omit_stages: OmitStages,
    /// The rule's setting, or the policy's when the rule has none.
    omit_managed_fields: bool,
}

#[derive(Debug, Clone)]
struct GroupResources {
    /// `*` matches every group.
    group: String,
    resources: Vec<String>,
    resource_names: Vec<String>,
}

/// A `nonResourceURLs` entry.
#[derive(Debug, Clone)]
enum UrlPattern {
    /// `*`
    Any,
    /// `/healthz`
    Exact(String),
    /// `/healthz*`, stored without its trailing stars.
    Prefix(String),
}

impl Policy {
    /// Reads and checks the policy file at `path`.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Policy::parse(&text).map_err(|e| e.at(path))
    }

    /// Parses and checks a policy document (YAML or JSON).
    pub fn parse(text: &str) -> Result<Policy, Problem> {
        file::parse(text)
    }

    /// The decision for one request: the first matching rule's, else `None` with the policy's
    /// omitted stages (as upstream).
    pub fn evaluate(&self, attrs: &Attributes<'_>) -> Decision {
        self.rules.iter().find(|rule| rule.matches(attrs)).map_or(
            Decision {
                level: Level::None,
                omit_stages: self.omit_stages,
                omit_managed_fields: self.omit_managed_fields,
            },
            |rule| Decision {
                level: rule.level,
                omit_stages: rule.omit_stages,
                omit_managed_fields: rule.omit_managed_fields,
            },
        )
    }

    /// How many rules the policy has.
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|s| s == value)
}

impl Rule {
    fn matches(&self, attrs: &Attributes<'_>) -> bool {
        if !self.users.is_empty() && !has(&self.users, attrs.user) {
            return false;
        }
        if !self.user_groups.is_empty() && !attrs.groups.iter().any(|g| has(&self.user_groups, g)) {
            return false;
        }
        if !self.verbs.is_empty() && !has(&self.verbs, &attrs.info.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(attrs.info);
        }
        if !self.non_resource_urls.is_empty() {
            return !attrs.info.resource_request
                && self
                    .non_resource_urls
                    .iter()
                    .any(|p| p.matches(attrs.info.path));
        }
        true
    }

    fn matches_resource(&self, info: &RequestInfo<'_>) -> bool {
        if !info.resource_request {
            return false;
        }
        // Cluster-scoped requests have the namespace "".
        if !self.namespaces.is_empty() && !has(&self.namespaces, info.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let (resource, subresource) = (info.resource, info.subresource);
        self.resources.iter().any(|gr| {
            (gr.group == info.group || gr.group == "*")
                && (gr.resources.is_empty()
                    || ((gr.resource_names.is_empty() || has(&gr.resource_names, &info.name))
                        && gr
                            .resources
                            .iter()
                            .any(|r| resource_matches(r, resource, subresource))))
        })
    }
}

/// One `resources` entry against a request's resource and subresource, as upstream: `*`,
/// `resource`, `resource/subresource`, `*/subresource`, and `resource/*` (which also matches the
/// resource itself).
fn resource_matches(pattern: &str, resource: &str, subresource: &str) -> bool {
    if pattern == "*" || equals_combined(pattern, resource, subresource) {
        return true;
    }
    if let Some(sub) = pattern.strip_prefix("*/") {
        if !subresource.is_empty() && sub == subresource {
            return true;
        }
    }
    pattern.strip_suffix("/*") == Some(resource)
}

/// Whether `pattern` equals `resource` or `resource/subresource` (without building the latter).
fn equals_combined(pattern: &str, resource: &str, subresource: &str) -> bool {
    if subresource.is_empty() {
        return pattern == resource;
    }
    pattern.len() == resource.len() + 1 + subresource.len()
        && pattern.starts_with(resource)
        && pattern[resource.len()..].starts_with('/')
        && pattern.ends_with(subresource)
}

impl UrlPattern {
    fn new(spec: &str) -> UrlPattern {
        if spec == "*" {
            UrlPattern::Any
        } else if spec.ends_with('*') {
            UrlPattern::Prefix(spec.trim_end_matches('*').to_string())
        } else {
            UrlPattern::Exact(spec.to_string())
        }
    }

    fn matches(&self, path: &str) -> bool {
        match self {
            UrlPattern::Any => true,
            UrlPattern::Exact(spec) => spec == path,
            UrlPattern::Prefix(prefix) => path.starts_with(prefix.as_str()),
        }
    }
}

#[cfg(test)]
mod tests;
