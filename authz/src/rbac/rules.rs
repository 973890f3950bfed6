//! Whether one PolicyRule covers a request (upstream's `evaluation_helpers.go`).

use k8s_openapi::api::rbac::v1::PolicyRule;

use crate::attributes::Attributes;

/// A rule as the index keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    verbs: Box<[String]>,
    api_groups: Box<[String]>,
    resources: Box<[String]>,
    resource_names: Box<[String]>,
    non_resource_urls: Box<[String]>,
}

impl From<PolicyRule> for Rule {
    fn from(rule: PolicyRule) -> Self {
        let boxed = |list: Option<Vec<String>>| list.unwrap_or_default().into_boxed_slice();
        Rule {
            verbs: rule.verbs.into_boxed_slice(),
            api_groups: boxed(rule.api_groups),
            resources: boxed(rule.resources),
            resource_names: boxed(rule.resource_names),
            non_resource_urls: boxed(rule.non_resource_urls),
        }
    }
}

impl Rule {
    /// Whether this rule covers the request.
    pub(crate) fn allows(&self, request: &Attributes) -> bool {
        allows(
            RuleFields {
                verbs: &self.verbs,
                api_groups: &self.api_groups,
                resources: &self.resources,
                resource_names: &self.resource_names,
                non_resource_urls: &self.non_resource_urls,
            },
            request,
        )
    }
}

/// Whether `rule` covers the request, as upstream's `RuleAllows`:
///
/// - verbs and API groups: `*` or the exact string (case-sensitive);
/// - resources: `*`, the exact `resource` or `resource/subresource`, or `*/subresource`; there
///   is no `resource/*` wildcard (it names a subresource literally called `*`);
/// - resource names: an empty list allows any name (and none); a non-empty list needs the
///   request's name in it, so a `list` or `create` (no name) does not match;
/// - non-resource URLs: `*`, the exact path, or a pattern ending in `*` whose text before the
///   trailing `*`s is a prefix of the path; a `*` elsewhere is a literal character.
///
/// Resource rules only match resource requests and URL rules only non-resource requests; a rule
/// holding both matches each kind of request with its own half.
pub fn rule_allows(rule: &PolicyRule, request: &Attributes) -> bool {
    fn list(field: &Option<Vec<String>>) -> &[String] {
        field.as_deref().unwrap_or(&[])
    }
    allows(
        RuleFields {
            verbs: &rule.verbs,
            api_groups: list(&rule.api_groups),
            resources: list(&rule.resources),
            resource_names: list(&rule.resource_names),
            non_resource_urls: list(&rule.non_resource_urls),
        },
        request,
    )
}

#[derive(Clone, Copy)]
struct RuleFields<'a> {
    verbs: &'a [String],
    api_groups: &'a [String],
    resources: &'a [String],
    resource_names: &'a [String],
    non_resource_urls: &'a [String],
}

fn allows(rule: RuleFields<'_>, request: &Attributes) -> bool {
    if !any_or_equal(rule.verbs, &request.verb) {
        return false;
    }
    if request.resource_request {
        any_or_equal(rule.api_groups, &request.group)
            && resource_matches(rule.resources, &request.resource, &request.subresource)
            && name_matches(rule.resource_names, &request.name)
    } else {
        url_matches(rule.non_resource_urls, &request.path)
    }
}

/// `*` or an exact match (verbs and API groups).
fn any_or_equal(list: &[String], wanted: &str) -> bool {
    list.iter().any(|item| item == "*" || item == wanted)
}

/// Upstream compares each entry with `resource` or `resource/subresource` and, when the request
/// names a subresource, with `*/subresource`; this compares without building those strings.
fn resource_matches(list: &[String], resource: &str, subresource: &str) -> bool {
    list.iter().any(|item| {
        if item == "*" {
            return true;
        }
        if subresource.is_empty() {
            return item == resource;
        }
        let combined = item
            .strip_prefix(resource)
            .and_then(|rest| rest.strip_prefix('/'))
            .is_some_and(|rest| rest == subresource);
        combined || item.strip_prefix("*/") == Some(subresource)
    })
}

/// An empty list allows any name; otherwise the name must be listed.
fn name_matches(list: &[String], name: &str) -> bool {
    list.is_empty() || list.iter().any(|item| item == name)
}

fn url_matches(list: &[String], path: &str) -> bool {
    list.iter().any(|item| {
        item == "*"
            || item == path
            || (item.ends_with('*') && path.starts_with(item.trim_end_matches('*')))
    })
}
