//! FlowSchema rules, validated and compiled once, matched on every request without allocating
//! (upstream `apf_filter.go`/`rule.go`: subjects, then resource or non-resource rules).

use apiagg_requestinfo::RequestInfo;
use k8s_openapi::api::flowcontrol::v1::{
    NonResourcePolicyRule, PolicyRulesWithSubjects, ResourcePolicyRule, Subject as ApiSubject,
};

use super::error::FieldError;

/// A rule's compilation: the field that fails validation, its path relative to the rule set.
type Result<T, E = FieldError> = std::result::Result<T, E>;

/// `*` in verbs, groups, resources, namespaces, names and URLs.
const ALL: &str = "*";
/// The user-name prefix of service accounts.
const SA_PREFIX: &str = "system:serviceaccount:";

/// What classification reads of a request: who sent it and what it asks for.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The user name (`system:anonymous` for anonymous requests).
    pub user: &'a str,
    /// The user's groups (`system:authenticated`, `system:unauthenticated`, …).
    pub groups: &'a [String],
    /// The one parse of the request.
    pub info: &'a RequestInfo<'a>,
}

/// How a FlowSchema splits its requests into flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distinguisher {
    /// One flow for the whole schema.
    None,
    /// One flow per user name.
    ByUser,
    /// One flow per namespace (cluster-scoped and non-resource requests share the empty one).
    ByNamespace,
}

impl Distinguisher {
    /// The flow distinguisher of `request`.
    pub fn of<'a>(self, request: &Request<'a>) -> &'a str {
        match self {
            Distinguisher::None => "",
            Distinguisher::ByUser => request.user,
            Distinguisher::ByNamespace => request.info.namespace,
        }
    }
}

/// A set of strings where `*` matches everything.
#[derive(Debug, Clone, PartialEq)]
enum Names {
    All,
    Only(Box<[Box<str>]>),
}

impl Names {
    fn compile(field: &str, items: &[String]) -> Result<Names> {
        if items.is_empty() {
            return Err(FieldError::required(field));
        }
        if items.iter().any(|i| i == ALL) {
            if items.len() > 1 {
                return Err(FieldError::StarNotAlone {
                    field: field.to_string(),
                });
            }
            return Ok(Names::All);
        }
        Ok(Names::Only(
            items.iter().map(|s| s.as_str().into()).collect(),
        ))
    }

    fn contains(&self, value: &str) -> bool {
        match self {
            Names::All => true,
            Names::Only(items) => items.iter().any(|i| **i == *value),
        }
    }
}

/// One subject, as upstream's `matchesSubject`.
#[derive(Debug, Clone, PartialEq)]
enum Subject {
    AnyUser,
    User(Box<str>),
    AnyGroup,
    Group(Box<str>),
    /// Every service account of a namespace.
    Namespace(Box<str>),
    /// One service account.
    Account {
        namespace: Box<str>,
        name: Box<str>,
    },
}

impl Subject {
    fn compile(subject: &ApiSubject) -> Result<Subject> {
        let missing = |member: &str| FieldError::required(format!("subjects.{member}"));
        match subject.kind.as_str() {
            "User" => match subject.user.as_ref().map(|u| u.name.as_str()) {
                None | Some("") => Err(missing("user.name")),
                Some(ALL) => Ok(Subject::AnyUser),
                Some(name) => Ok(Subject::User(name.into())),
            },
            "Group" => match subject.group.as_ref().map(|g| g.name.as_str()) {
                None | Some("") => Err(missing("group.name")),
                Some(ALL) => Ok(Subject::AnyGroup),
                Some(name) => Ok(Subject::Group(name.into())),
            },
            "ServiceAccount" => {
                let account = subject
                    .service_account
                    .as_ref()
                    .ok_or_else(|| missing("serviceAccount"))?;
                if account.namespace.is_empty() {
                    return Err(missing("serviceAccount.namespace"));
                }
                let namespace = account.namespace.as_str().into();
                match account.name.as_str() {
                    "" => Err(missing("serviceAccount.name")),
                    ALL => Ok(Subject::Namespace(namespace)),
                    name => Ok(Subject::Account {
                        namespace,
                        name: name.into(),
                    }),
                }
            }
            other => Err(FieldError::unsupported(
                "subjects.kind",
                other,
                &["Group", "ServiceAccount", "User"],
            )),
        }
    }

    fn matches(&self, user: &str, groups: &[String]) -> bool {
        match self {
            Subject::AnyUser | Subject::AnyGroup => true,
            Subject::User(name) => **name == *user,
            Subject::Group(name) => groups.iter().any(|g| **name == **g),
            Subject::Namespace(namespace) => {
                service_account(user).is_some_and(|(ns, _)| ns == &**namespace)
            }
            Subject::Account { namespace, name } => {
                service_account(user).is_some_and(|(ns, n)| ns == &**namespace && n == &**name)
            }
        }
    }
}

/// `system:serviceaccount:<namespace>:<name>` → `(namespace, name)`.
fn service_account(user: &str) -> Option<(&str, &str)> {
    let (namespace, name) = user.strip_prefix(SA_PREFIX)?.split_once(':')?;
    let valid = !namespace.is_empty() && !name.is_empty() && !name.contains(':');
    valid.then_some((namespace, name))
}

/// `resource` or `resource/subresource`, matched as upstream joins them.
#[derive(Debug, Clone, PartialEq)]
enum Resources {
    All,
    Only(Box<[ResourceName]>),
}

#[derive(Debug, Clone, PartialEq)]
struct ResourceName {
    resource: Box<str>,
    /// `None`: the resource itself, no subresource.
    subresource: Option<Box<str>>,
}

impl Resources {
    fn contains(&self, resource: &str, subresource: &str) -> bool {
        let Resources::Only(items) = self else {
            return true;
        };
        items.iter().any(|name| {
            *name.resource == *resource
                && match &name.subresource {
                    None => subresource.is_empty(),
                    Some(s) => **s == *subresource,
                }
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
struct ResourceRule {
    verbs: Names,
    groups: Names,
    resources: Resources,
    cluster_scope: bool,
    /// `None`: no namespace at all (cluster scope only).
    namespaces: Option<Names>,
}

impl ResourceRule {
    fn compile(rule: &ResourcePolicyRule) -> Result<ResourceRule> {
        let verbs = Names::compile("resourceRules.verbs", &rule.verbs)?;
        let groups = Names::compile("resourceRules.apiGroups", &rule.api_groups)?;
        let resources = match Names::compile("resourceRules.resources", &rule.resources)? {
            Names::All => Resources::All,
            Names::Only(items) => Resources::Only(
                items
                    .iter()
                    .map(|item| match item.split_once('/') {
                        Some((r, s)) => ResourceName {
                            resource: r.into(),
                            subresource: Some(s.into()),
                        },
                        None => ResourceName {
                            resource: item.clone(),
                            subresource: None,
                        },
                    })
                    .collect(),
            ),
        };
        let cluster_scope = rule.cluster_scope.unwrap_or(false);
        let namespaces = match rule.namespaces.as_deref().unwrap_or_default() {
            [] if cluster_scope => None,
            [] => {
                return Err(FieldError::required_because(
                    "resourceRules.namespaces",
                    "resource rules that are not cluster scoped must supply at least one \
                     namespace",
                ))
            }
            items => Some(Names::compile("resourceRules.namespaces", items)?),
        };
        Ok(ResourceRule {
            verbs,
            groups,
            resources,
            cluster_scope,
            namespaces,
        })
    }

    fn matches(&self, info: &RequestInfo<'_>) -> bool {
        self.verbs.contains(&info.verb)
            && self.groups.contains(info.group)
            && self.resources.contains(info.resource, info.subresource)
            && if info.namespace.is_empty() {
                self.cluster_scope
            } else {
                self.namespaces
                    .as_ref()
                    .is_some_and(|n| n.contains(info.namespace))
            }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Url {
    Exact(Box<str>),
    Prefix(Box<str>),
}

#[derive(Debug, Clone, PartialEq)]
struct NonResourceRule {
    verbs: Names,
    /// Empty: every URL (`*`).
    urls: Box<[Url]>,
}

impl NonResourceRule {
    fn compile(rule: &NonResourcePolicyRule) -> Result<NonResourceRule> {
        let verbs = Names::compile("nonResourceRules.verbs", &rule.verbs)?;
        let field = "nonResourceRules.nonResourceURLs";
        let urls = match Names::compile(field, &rule.non_resource_urls)? {
            Names::All => Box::default(),
            Names::Only(items) => items
                .iter()
                .map(|url| {
                    let invalid = |why: &str| Err(FieldError::invalid(field, url, why));
                    if !url.starts_with('/') {
                        return invalid("must start with slash");
                    }
                    if url.contains(char::is_whitespace) {
                        return invalid("must not contain white-space");
                    }
                    if url.contains("//") {
                        return invalid("must not contain double slash");
                    }
                    match url.strip_suffix('*') {
                        Some(prefix) if prefix.ends_with('/') && !prefix.contains('*') => {
                            Ok(Url::Prefix(prefix.into()))
                        }
                        None if !url.contains('*') => Ok(Url::Exact(url.clone())),
                        _ => invalid("wildcard can only do suffix glob matching"),
                    }
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(NonResourceRule { verbs, urls })
    }

    fn matches(&self, info: &RequestInfo<'_>) -> bool {
        self.verbs.contains(&info.verb)
            && (self.urls.is_empty()
                || self.urls.iter().any(|url| match url {
                    Url::Exact(u) => **u == *info.path,
                    Url::Prefix(p) => info.path.starts_with(&**p),
                }))
    }
}

/// One `PolicyRulesWithSubjects`: a subject matches and then a rule of the request's kind.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSet {
    subjects: Box<[Subject]>,
    resource: Box<[ResourceRule]>,
    non_resource: Box<[NonResourceRule]>,
}

impl RuleSet {
    /// Validates and compiles one rule set (the message names the field).
    pub fn compile(rules: &PolicyRulesWithSubjects) -> Result<RuleSet> {
        if rules.subjects.is_empty() {
            return Err(FieldError::required("rules.subjects"));
        }
        let subjects = rules.subjects.iter().map(Subject::compile);
        let resource = rules.resource_rules.iter().flatten();
        let non_resource = rules.non_resource_rules.iter().flatten();
        let set = RuleSet {
            subjects: subjects.collect::<Result<_, _>>()?,
            resource: resource
                .map(ResourceRule::compile)
                .collect::<Result<_, _>>()?,
            non_resource: non_resource
                .map(NonResourceRule::compile)
                .collect::<Result<_, _>>()?,
        };
        if set.resource.is_empty() && set.non_resource.is_empty() {
            return Err(FieldError::required_because(
                "rules",
                "at least one of resourceRules and nonResourceRules has to be non-empty",
            ));
        }
        Ok(set)
    }

    /// Whether `request` matches (upstream `matchesPolicyRule`).
    pub fn matches(&self, request: &Request<'_>) -> bool {
        if !self
            .subjects
            .iter()
            .any(|s| s.matches(request.user, request.groups))
        {
            return false;
        }
        let info = request.info;
        if info.resource_request {
            self.resource.iter().any(|r| r.matches(info))
        } else {
            self.non_resource.iter().any(|r| r.matches(info))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_names_split_like_upstream() {
        assert_eq!(
            service_account("system:serviceaccount:kube-system:default"),
            Some(("kube-system", "default"))
        );
        assert_eq!(service_account("system:serviceaccount:kube-system"), None);
        assert_eq!(service_account("system:serviceaccount::x"), None);
        assert_eq!(service_account("system:serviceaccount:a:b:c"), None);
        assert_eq!(service_account("alice"), None);
    }

    #[test]
    fn star_must_stand_alone() {
        let err = Names::compile("verbs", &["*".into(), "get".into()]).expect_err("refused");
        assert_eq!(
            err,
            FieldError::StarNotAlone {
                field: "verbs".into()
            }
        );
        assert!(err.to_string().contains("must not specify other values"));
        assert_eq!(
            Names::compile("verbs", &[]),
            Err(FieldError::required("verbs"))
        );
    }

    #[test]
    fn urls_allow_a_star_only_as_the_last_segment() {
        let rule = |url: &str| {
            NonResourceRule::compile(&NonResourcePolicyRule {
                verbs: vec!["get".into()],
                non_resource_urls: vec![url.into()],
            })
        };
        assert!(rule("/healthz/*").is_ok());
        assert!(rule("/*").is_ok());
        assert!(rule("/healthz").is_ok());
        assert!(rule("/heal*").is_err());
        assert!(rule("/a/*/b").is_err());
        assert!(rule("healthz").is_err());
    }
}
