//! The impersonation modes and the checks each asks for (upstream's
//! `filters/impersonation/mode.go`, KEP-5284).

use super::*;

/// The extra key a node's service account carries its node name in.
const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";
/// The extra an `associated-node` check shows instead of the caller's own extra.
const ASSOCIATED_NODE_KEYS: &str = "authentication.kubernetes.io/associated-node-keys";
/// The group of the constrained checks' resources.
const AUTHN_GROUP: &str = "authentication.k8s.io";
/// From this many groups (or extra values) on, `*` is asked first.
const WILDCARD_FROM: usize = 4;

/// One way of impersonating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::auth::authz) enum Mode {
    /// A node's service account impersonating its own node.
    AssociatedNode,
    /// Any node.
    ArbitraryNode,
    /// A service account.
    ServiceAccount,
    /// Any other user, with groups, UID and extra.
    UserInfo,
    /// kube-apiserver's original `impersonate` verb.
    Legacy,
}

/// The modes in the order they are tried.
pub(in crate::auth::authz) const MODES: [Mode; 5] = [
    Mode::AssociatedNode,
    Mode::ArbitraryNode,
    Mode::ServiceAccount,
    Mode::UserInfo,
    Mode::Legacy,
];

/// One check, or a wildcard check that spares the ones after it.
pub(in crate::auth::authz) enum Step {
    /// Must allow.
    One(Attributes),
    /// `all` allowing spares `each`; otherwise every one of `each` must allow.
    Wildcard {
        all: Attributes,
        each: Vec<Attributes>,
    },
}

/// What a mode asks, and the groups it gives.
pub(in crate::auth::authz) struct Plan {
    /// The extra the checks show for the caller (`associated-node`), else its own.
    pub(in crate::auth::authz) subject_extra: Option<Vec<(String, Vec<String>)>>,
    pub(in crate::auth::authz) steps: Vec<Step>,
    pub(in crate::auth::authz) groups: Vec<String>,
}

/// A service account's default groups.
pub(in crate::auth::authz) fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{namespace}"),
    ]
}

/// The node name of a node user name (`system:node:<name>`, a DNS subdomain).
fn node_name(user: &str) -> Option<&str> {
    let name = user.strip_prefix("system:node:")?;
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    valid.then_some(name)
}

/// A check of `verb` on `resource` named `name` in the constrained group.
fn identity(verb: &str, resource: &str, name: &str) -> Attributes {
    Attributes {
        verb: verb.into(),
        resource_request: true,
        group: AUTHN_GROUP.into(),
        version: "v1".into(),
        resource: resource.into(),
        name: name.into(),
        ..Attributes::default()
    }
}

/// A legacy check (`users`, `groups` and `serviceaccounts` are in the core group).
fn legacy(resource: &str, group: &str, name: &str) -> Attributes {
    Attributes {
        group: group.into(),
        ..identity("impersonate", resource, name)
    }
}

impl Mode {
    /// Its name in verbs.
    pub(in crate::auth::authz) fn name(self) -> &'static str {
        match self {
            Mode::AssociatedNode => "associated-node",
            Mode::ArbitraryNode => "arbitrary-node",
            Mode::ServiceAccount => "serviceaccount",
            Mode::UserInfo => "user-info",
            Mode::Legacy => "legacy",
        }
    }

    /// Whether the mode applies to `wanted` asked by `requestor`.
    pub(in crate::auth::authz) fn applies(self, wanted: &Wanted, requestor: &User) -> bool {
        let node = node_name(&wanted.name);
        match self {
            Mode::AssociatedNode => {
                let own = requestor
                    .extra
                    .iter()
                    .find(|(k, _)| k == NODE_NAME_EXTRA)
                    .map(|(_, v)| v.as_slice());
                wanted.name_only()
                    && service_account(&requestor.name).is_some()
                    && matches!((node, own), (Some(n), Some([own])) if n == own)
            }
            Mode::ArbitraryNode => wanted.name_only() && node.is_some(),
            Mode::ServiceAccount => wanted.name_only() && service_account(&wanted.name).is_some(),
            Mode::UserInfo => node.is_none() && service_account(&wanted.name).is_none(),
            Mode::Legacy => true,
        }
    }

    /// The checks for `wanted` asked by `requestor` while doing `a`; `Err` for what the mode
    /// refuses outright.
    pub(in crate::auth::authz) fn plan(
        self,
        wanted: &Wanted,
        requestor: &User,
        a: &Attributes,
    ) -> Result<Plan, Refusal> {
        if self == Mode::Legacy {
            return Ok(legacy_plan(wanted));
        }
        let verb = format!("impersonate:{}", self.name());
        let on = Attributes {
            verb: format!("impersonate-on:{}:{}", self.name(), a.verb),
            ..a.clone()
        };
        let mut steps = vec![Step::One(on)];
        let mut subject_extra = None;
        let groups = match self {
            Mode::AssociatedNode => {
                let mut keys: Vec<String> =
                    requestor.extra.iter().map(|(k, _)| k.clone()).collect();
                keys.sort();
                subject_extra = Some(vec![(ASSOCIATED_NODE_KEYS.to_string(), keys)]);
                steps.push(Step::One(identity(&verb, "nodes", "*")));
                vec!["system:nodes".to_string()]
            }
            Mode::ArbitraryNode => {
                let node = node_name(&wanted.name).unwrap_or_default();
                steps.push(Step::One(identity(&verb, "nodes", node)));
                vec!["system:nodes".to_string()]
            }
            Mode::ServiceAccount => {
                let (namespace, name) = service_account(&wanted.name).unwrap_or_default();
                let mut check = identity(&verb, "serviceaccounts", name);
                check.namespace = namespace.into();
                steps.push(Step::One(check));
                service_account_groups(namespace)
            }
            _ => {
                user_info_steps(&verb, wanted, requestor, &mut steps)?;
                wanted.groups.clone()
            }
        };
        Ok(Plan {
            subject_extra,
            steps,
            groups,
        })
    }
}

/// `user-info`'s checks: the user, its UID, its groups and its extra.
fn user_info_steps(
    verb: &str,
    wanted: &Wanted,
    requestor: &User,
    steps: &mut Vec<Step>,
) -> Result<(), Refusal> {
    steps.push(Step::One(identity(verb, "users", &wanted.name)));
    if let Some(uid) = &wanted.uid {
        steps.push(Step::One(identity(verb, "uids", uid)));
    }
    for group in &wanted.groups {
        let reason = match group.as_str() {
            "" => "impersonating the empty string group is not allowed",
            PRIVILEGED_GROUP => "impersonating the system:masters group is not allowed",
            _ => continue,
        };
        return Err(forbidden(
            requestor,
            &identity(verb, "groups", group),
            reason,
        ));
    }
    let each: Vec<Attributes> = wanted
        .groups
        .iter()
        .map(|g| identity(verb, "groups", g))
        .collect();
    if wanted.groups.len() >= WILDCARD_FROM {
        steps.push(Step::Wildcard {
            all: identity(verb, "groups", "*"),
            each,
        });
    } else {
        steps.extend(each.into_iter().map(Step::One));
    }
    let mut each = Vec::new();
    for (key, values) in &wanted.extra {
        let mut check = identity(verb, "userextras", "");
        check.subresource = key.clone();
        if let Some(why) = invalid_extra(key, values) {
            return Err(forbidden(requestor, &check, &why));
        }
        for value in values {
            each.push(Attributes {
                name: value.clone(),
                ..check.clone()
            });
        }
    }
    if wanted.extra.len() >= WILDCARD_FROM || each.len() >= WILDCARD_FROM {
        let mut all = identity(verb, "userextras", "*");
        all.subresource = "*".into();
        steps.push(Step::Wildcard { all, each });
    } else {
        steps.extend(each.into_iter().map(Step::One));
    }
    Ok(())
}

/// Why an impersonated extra key or its values are refused (upstream's `validateExtra`).
fn invalid_extra(key: &str, values: &[String]) -> Option<String> {
    if key.is_empty() {
        return Some("empty extra key is not allowed".into());
    }
    if key != key.to_lowercase() {
        return Some(format!("extra key {key:?} must be lower case"));
    }
    let domain_prefixed = key
        .split_once('/')
        .is_some_and(|(domain, path)| domain.contains('.') && !path.is_empty());
    if !domain_prefixed {
        return Some(format!("extra key {key:?} must be a domain-prefixed path"));
    }
    if values.is_empty() || values.iter().any(String::is_empty) {
        return Some(format!("empty values of extra key {key:?} are not allowed"));
    }
    None
}

/// The legacy checks: `impersonate` on the user or service account, each group, each extra
/// value and the UID; a service account gets its default groups when none are asked for.
fn legacy_plan(wanted: &Wanted) -> Plan {
    let mut steps = Vec::new();
    let mut groups = wanted.groups.clone();
    match service_account(&wanted.name) {
        Some((namespace, account)) => {
            let mut check = legacy("serviceaccounts", "", account);
            check.namespace = namespace.into();
            steps.push(Step::One(check));
            if groups.is_empty() {
                groups = service_account_groups(namespace);
            }
        }
        None => steps.push(Step::One(legacy("users", "", &wanted.name))),
    }
    for group in &wanted.groups {
        steps.push(Step::One(legacy("groups", "", group)));
    }
    for (key, values) in &wanted.extra {
        for value in values {
            let mut check = legacy("userextras", AUTHN_GROUP, value);
            check.subresource = key.clone();
            steps.push(Step::One(check));
        }
    }
    if let Some(uid) = &wanted.uid {
        steps.push(Step::One(legacy("uids", AUTHN_GROUP, uid)));
    }
    Plan {
        subject_extra: None,
        steps,
        groups,
    }
}
