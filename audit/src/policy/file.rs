//! Reading a policy document: lenient decoding with a warning for unknown fields (kube-apiserver
//! tries strict decoding, then falls back to lenient with a warning), `apiVersion` and `kind`
//! checked, then the validation of `apis/audit/validation` with its messages.

use std::path::Path;

use serde::{Deserialize, Deserializer};

use super::{GroupResources, Level, OmitStages, Policy, PolicyError, Rule, Stage, UrlPattern};

/// What is wrong with a policy document (without the file name; see [`Problem::at`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// Not a policy document: syntax, types, `apiVersion` or `kind`.
    #[error("{0}")]
    Decode(String),
    /// The document breaks the validation rules.
    #[error("{0}")]
    Invalid(String),
}

impl Problem {
    /// The error for the file at `path`.
    pub fn at(self, path: &Path) -> PolicyError {
        let path = path.to_path_buf();
        match self {
            Problem::Decode(message) => PolicyError::Decode { path, message },
            Problem::Invalid(message) => PolicyError::Invalid { path, message },
        }
    }
}

/// The group and version policies are written in.
const API_VERSION: &str = "audit.k8s.io/v1";

/// `null` read as the default value, as Go's decoder reads it.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPolicy {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    rules: Vec<RawRule>,
    #[serde(default, deserialize_with = "nullable")]
    omit_stages: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    omit_managed_fields: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRule {
    #[serde(default, deserialize_with = "nullable")]
    level: String,
    #[serde(default, deserialize_with = "nullable")]
    users: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    user_groups: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    verbs: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    resources: Vec<RawGroupResources>,
    #[serde(default, deserialize_with = "nullable")]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs", deserialize_with = "nullable")]
    non_resource_urls: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    omit_stages: Vec<String>,
    #[serde(default)]
    omit_managed_fields: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawGroupResources {
    #[serde(default, deserialize_with = "nullable")]
    group: String,
    #[serde(default, deserialize_with = "nullable")]
    resources: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    resource_names: Vec<String>,
}

const POLICY_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "rules",
    "omitStages",
    "omitManagedFields",
];
const RULE_FIELDS: &[&str] = &[
    "level",
    "users",
    "userGroups",
    "verbs",
    "resources",
    "namespaces",
    "nonResourceURLs",
    "omitStages",
    "omitManagedFields",
];
const RESOURCE_FIELDS: &[&str] = &["group", "resources", "resourceNames"];

/// Parses and checks a policy document.
pub(super) fn parse(text: &str) -> Result<Policy, Problem> {
    let raw: RawPolicy =
        serde_yaml_ng::from_str(text).map_err(|e| Problem::Decode(format!("decoding: {e}")))?;
    match raw.api_version.as_deref() {
        Some(API_VERSION) => {}
        Some(other) => {
            return Err(Problem::Decode(format!(
                "unknown apiVersion {other:?}: must be {API_VERSION}"
            )))
        }
        None => return Err(Problem::Decode("apiVersion is missing".into())),
    }
    match raw.kind.as_deref() {
        Some("Policy") => {}
        Some(other) => {
            return Err(Problem::Decode(format!(
                "unknown kind {other:?}: must be Policy"
            )))
        }
        None => return Err(Problem::Decode("kind is missing".into())),
    }
    let unknown = unknown_fields(text);
    if !unknown.is_empty() {
        tracing::warn!(
            fields = %unknown.join(", "),
            "audit policy contains unknown fields, which are ignored"
        );
    }
    let policy = check(raw)?;
    if policy.rules.is_empty() {
        return Err(Problem::Invalid(
            "loaded illegal policy with 0 rules".into(),
        ));
    }
    Ok(policy)
}

/// Paths of fields no policy has (`rules[2].levle`).
fn unknown_fields(text: &str) -> Vec<String> {
    use serde_yaml_ng::Value;
    let Ok(Value::Mapping(top)) = serde_yaml_ng::from_str::<Value>(text) else {
        return Vec::new();
    };
    let mut unknown = Vec::new();
    let mut check = |map: &serde_yaml_ng::Mapping, known: &[&str], at: &str| {
        for key in map.keys() {
            let name = key.as_str().unwrap_or("?");
            if !known.contains(&name) {
                unknown.push(format!("{at}{name}"));
            }
        }
    };
    check(&top, POLICY_FIELDS, "");
    let rules = top.get("rules").and_then(Value::as_sequence);
    for (i, rule) in rules.into_iter().flatten().enumerate() {
        let Some(rule) = rule.as_mapping() else {
            continue;
        };
        check(rule, RULE_FIELDS, &format!("rules[{i}]."));
        let resources = rule.get("resources").and_then(Value::as_sequence);
        for (j, gr) in resources.into_iter().flatten().enumerate() {
            if let Some(gr) = gr.as_mapping() {
                check(gr, RESOURCE_FIELDS, &format!("rules[{i}].resources[{j}]."));
            }
        }
    }
    unknown
}

/// Validation as `ValidatePolicy`: every problem is collected; several are shown as a list.
fn check(raw: RawPolicy) -> Result<Policy, Problem> {
    let mut errors = Vec::new();
    let omit_stages = stages(&raw.omit_stages, "omitStages", &mut errors);
    let mut rules = Vec::with_capacity(raw.rules.len());
    for (i, rule) in raw.rules.into_iter().enumerate() {
        let at = format!("rules[{i}]");
        let level = match Level::parse(&rule.level) {
            Some(level) => level,
            None if rule.level.is_empty() => {
                errors.push(format!("{at}.level: Required value"));
                Level::None
            }
            None => {
                errors.push(format!(
                    "{at}.level: Unsupported value: {:?}: supported values: \"None\", \"Metadata\", \"Request\", \"RequestResponse\"",
                    rule.level
                ));
                Level::None
            }
        };
        for (j, url) in rule.non_resource_urls.iter().enumerate() {
            if url == "*" {
                continue;
            }
            if !url.starts_with('/') {
                errors.push(format!("{at}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource URL rules must begin with a '/' character"));
            }
            if url.len() > 1 && url[..url.len() - 1].contains('*') {
                errors.push(format!("{at}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource URL wildcards '*' must be the final character of the rule"));
            }
        }
        for (j, gr) in rule.resources.iter().enumerate() {
            if !gr.group.is_empty() && gr.group != "*" && !is_dns1123_subdomain(&gr.group) {
                errors.push(format!("{at}.resources[{j}].group: Invalid value: {:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character", gr.group));
            }
            if !gr.resource_names.is_empty() && gr.resources.is_empty() {
                errors.push(format!("{at}.resources[{j}].resourceNames: Invalid value: {:?}: using resourceNames requires at least one resource", gr.resource_names));
            }
        }
        if !rule.non_resource_urls.is_empty()
            && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
        {
            errors.push(format!("{at}.nonResourceURLs: Invalid value: {:?}: rules cannot apply to both regular resources and non-resource URLs", rule.non_resource_urls));
        }
        let own = stages(&rule.omit_stages, &format!("{at}.omitStages"), &mut errors);
        rules.push(Rule {
            level,
            users: rule.users,
            user_groups: rule.user_groups,
            verbs: rule.verbs,
            resources: rule
                .resources
                .into_iter()
                .map(|gr| GroupResources {
                    group: gr.group,
                    resources: gr.resources,
                    resource_names: gr.resource_names,
                })
                .collect(),
            namespaces: rule.namespaces,
            non_resource_urls: rule
                .non_resource_urls
                .iter()
                .map(|u| UrlPattern::new(u))
                .collect(),
            omit_stages: own.union(omit_stages),
            omit_managed_fields: rule.omit_managed_fields.unwrap_or(raw.omit_managed_fields),
        });
    }
    match errors.len() {
        0 => Ok(Policy {
            rules,
            omit_stages,
            omit_managed_fields: raw.omit_managed_fields,
        }),
        1 => Err(Problem::Invalid(errors.remove(0))),
        _ => Err(Problem::Invalid(format!("[{}]", errors.join(", ")))),
    }
}

fn stages(names: &[String], at: &str, errors: &mut Vec<String>) -> OmitStages {
    let mut set = OmitStages::NONE;
    for (i, name) in names.iter().enumerate() {
        match Stage::parse(name) {
            Some(stage) => set = set.with(stage),
            None => errors.push(format!(
                "{at}[{i}]: Invalid value: {name:?}: allowed stages are RequestReceived,ResponseStarted,ResponseComplete,Panic"
            )),
        }
    }
    set
}

/// A lowercase RFC 1123 subdomain (what API group names must be).
fn is_dns1123_subdomain(value: &str) -> bool {
    value.len() <= 253
        && value.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                && bytes.first() != Some(&b'-')
                && bytes.last() != Some(&b'-')
        })
}
