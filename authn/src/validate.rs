//! Loading an `AuthenticationConfiguration`: strict decoding, then every check of
//! kube-apiserver's `ValidateAuthenticationConfiguration` with its field paths and messages
//! (`jwt[0].issuer.url: Required value`), every CEL expression compiled on the way. All the
//! problems of a file are reported at once, as upstream does.
//!
//! Beyond upstream:
//! - a username or groups `prefix` starting with `system:` is refused (a token must not map to
//!   a Kubernetes identity by configuration);
//! - each `anonymous.conditions[i].path` is required and must start with `/`;
//! - an `https` issuer or discovery URL must also parse as a WHATWG URL (the gateway fetches it),
//!   with its host after `//` (`https:/host`, which Go reads without a host, is refused).
//!
//! Allowed as upstream allows it: a username `claim` other than `email` with an empty prefix.
//! Its values then become usernames as they are, `system:…` included when the issuer signs
//! such a claim; configurations doing so should add a user validation rule such as
//! `!user.username.startsWith('system:')`.

use std::collections::HashSet;

use crate::config::{self, AuthenticationConfiguration, PrefixedClaimOrExpression};
use crate::expr::{Expression, Scope};
use crate::mapping::{JwtAuthenticator, Rule, Source};

pub mod field;
mod issuer;

use field::{quote, Errors};

/// The most `jwt` entries a file may hold (upstream's limit).
pub const MAX_JWT: usize = 64;
/// The prefix reserved for Kubernetes identities, refused in username and groups prefixes.
pub const RESERVED_PREFIX: &str = "system:";

/// A loaded, validated configuration.
#[derive(Debug)]
pub struct Loaded {
    /// The issuers, compiled, in the file's order.
    pub jwt: Vec<JwtAuthenticator>,
    /// The `anonymous` section, when the file has one.
    pub anonymous: Option<Anonymous>,
}

/// `anonymous` of the file: enabled, and the exact paths open when conditions are given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Anonymous {
    /// Whether requests without credentials are `system:anonymous`.
    pub enabled: bool,
    /// The exact paths open to anonymous requests (`None`: every path).
    pub paths: Option<Vec<String>>,
}

/// Every problem of a file, each `<field path>: <message>` as kube-apiserver words them (a
/// decoding or `apiVersion`/`kind` problem is the only one). Not retryable: the file must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<String>);

impl std::fmt::Display for ValidationErrors {
    /// As Go's `field.ErrorList.ToAggregate()`: the single error as is, several ones joined with
    /// `, ` inside `[...]`, a repeated message once.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut seen = HashSet::new();
        let unique: Vec<&str> = self
            .0
            .iter()
            .map(String::as_str)
            .filter(|e| seen.insert(*e))
            .collect();
        match unique.as_slice() {
            [one] => f.write_str(one),
            [] => Ok(()),
            many => write!(f, "[{}]", many.join(", ")),
        }
    }
}

/// Decodes (YAML or JSON, unknown fields refused) and validates a configuration file.
pub fn load(bytes: &[u8]) -> Result<Loaded, ValidationErrors> {
    let config = decode(bytes).map_err(|e| ValidationErrors(vec![e]))?;
    validate(&config)
}

/// The file's one decoding error, worded as upstream's decoder.
fn decode(bytes: &[u8]) -> Result<AuthenticationConfiguration, String> {
    field::decode_config(
        bytes,
        config::GROUP,
        &config::VERSIONS,
        "AuthenticationConfiguration",
    )
}

/// Validates a decoded configuration and compiles it.
pub fn validate(config: &AuthenticationConfiguration) -> Result<Loaded, ValidationErrors> {
    let mut errs = Errors::default();
    if config.jwt.len() > MAX_JWT {
        let error = format!(
            "jwt: Too many: {}: must have at most {MAX_JWT} items",
            config.jwt.len()
        );
        return Err(ValidationErrors(vec![error]));
    }
    let mut jwt = Vec::with_capacity(config.jwt.len());
    let (mut issuers, mut discovery_urls) = (HashSet::new(), HashSet::new());
    for (i, authenticator) in config.jwt.iter().enumerate() {
        let path = format!("jwt[{i}]");
        jwt.extend(jwt_authenticator(&mut errs, authenticator, &path));
        let issuer = &authenticator.issuer;
        if !issuers.insert(issuer.url.as_str()) {
            errs.duplicate(&format!("{path}.issuer.url"), &issuer.url);
        }
        if !issuer.discovery_url.is_empty() && !discovery_urls.insert(issuer.discovery_url.as_str())
        {
            errs.duplicate(
                &format!("{path}.issuer.discoveryURL"),
                &issuer.discovery_url,
            );
        }
    }
    let anonymous = config.anonymous.as_ref().map(|a| anonymous(&mut errs, a));
    if !errs.0.is_empty() {
        return Err(ValidationErrors(errs.0));
    }
    Ok(Loaded { jwt, anonymous })
}

/// `anonymous`: upstream's check, then each condition's path (required, starting with `/`:
/// apiagg's checks, as the paths are matched exactly).
fn anonymous(errs: &mut Errors, a: &config::AnonymousConfig) -> Anonymous {
    if !a.enabled && !a.conditions.is_empty() {
        let value = a
            .conditions
            .iter()
            .map(|c| {
                format!(
                    "apiserver.AnonymousAuthCondition{{Path:{}}}",
                    quote(&c.path)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let value = format!("[]apiserver.AnonymousAuthCondition{{{value}}}");
        errs.invalid_raw(
            "anonymous.conditions",
            &value,
            "enabled should be set to true when conditions are defined",
        );
    }
    for (i, condition) in a.conditions.iter().enumerate() {
        let path = format!("anonymous.conditions[{i}].path");
        if condition.path.is_empty() {
            errs.required(&path, "");
        } else if !condition.path.starts_with('/') {
            errs.invalid(&path, &condition.path, "must start with \"/\"");
        }
    }
    let paths =
        (!a.conditions.is_empty()).then(|| a.conditions.iter().map(|c| c.path.clone()).collect());
    Anonymous {
        enabled: a.enabled,
        paths,
    }
}

/// Validates `jwt[i]`; its compiled form when it has no error.
fn jwt_authenticator(
    errs: &mut Errors,
    a: &config::JwtAuthenticator,
    root: &str,
) -> Option<JwtAuthenticator> {
    let before = errs.0.len();
    issuer::issuer(errs, &a.issuer, &format!("{root}.issuer"));
    let rules = &a.claim_validation_rules;
    let (required_claims, claim_rules, verified) = claim_validation_rules(errs, rules, root);
    let mappings = claim_mappings(errs, &a.claim_mappings, root, verified);
    let user_rules = user_validation_rules(errs, &a.user_validation_rules, root);
    if errs.0.len() > before {
        return None;
    }
    let issuer = &a.issuer;
    Some(JwtAuthenticator {
        issuer: issuer.url.clone(),
        discovery_url: issuer.discovery_url.clone(),
        certificate_authority: issuer.certificate_authority.clone(),
        audiences: issuer.audiences.clone(),
        required_claims,
        claim_rules,
        username: mappings.username?,
        groups: mappings.groups,
        uid: mappings.uid,
        extra: mappings.extra,
        user_rules,
    })
}

/// `claimValidationRules`: the required claims, the rules, and whether a rule reads
/// `claims.email_verified`.
fn claim_validation_rules(
    errs: &mut Errors,
    rules: &[config::ClaimValidationRule],
    root: &str,
) -> (Vec<(String, String)>, Vec<Rule>, bool) {
    let mut uses_email_verified = false;
    let (mut required_claims, mut compiled) = (Vec::new(), Vec::new());
    let (mut seen_claims, mut seen_expressions) = (HashSet::new(), HashSet::new());
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("{root}.claimValidationRules[{i}]");
        match (rule.claim.is_empty(), rule.expression.is_empty()) {
            (false, false) => {
                errs.invalid(&path, &rule.claim, "claim and expression can't both be set")
            }
            (true, true) => errs.required(&path, "claim or expression is required"),
            (false, true) => {
                if !rule.message.is_empty() {
                    let detail = "may not be specified when claim is set";
                    errs.invalid(&format!("{path}.message"), &rule.message, detail);
                }
                if !seen_claims.insert(rule.claim.as_str()) {
                    errs.duplicate(&format!("{path}.claim"), &rule.claim);
                }
                required_claims.push((rule.claim.clone(), rule.required_value.clone()));
            }
            (true, false) => {
                if !rule.required_value.is_empty() {
                    let detail = "may not be specified when expression is set";
                    let value = &rule.required_value;
                    errs.invalid(&format!("{path}.requiredValue"), value, detail);
                }
                let path = format!("{path}.expression");
                if !seen_expressions.insert(rule.expression.as_str()) {
                    errs.duplicate(&path, &rule.expression);
                    continue;
                }
                if let Some(expression) = errs.compile(&path, &rule.expression, Scope::Claims) {
                    uses_email_verified |= expression.reads_claim("email_verified");
                    compiled.push(rule_of(expression, &rule.message));
                }
            }
        }
    }
    (required_claims, compiled, uses_email_verified)
}

/// `claimMappings`, compiled (`username` is `None` only with an error).
struct Mappings {
    username: Option<Source>,
    groups: Option<Source>,
    uid: Option<Source>,
    extra: Vec<(String, Expression)>,
}

/// `claimMappings`; `uses_email_verified`: whether a claim rule reads `claims.email_verified`.
fn claim_mappings(
    errs: &mut Errors,
    m: &config::ClaimMappings,
    root: &str,
    mut uses_email_verified: bool,
) -> Mappings {
    let path = format!("{root}.claimMappings");
    let username = prefixed(errs, &m.username, &format!("{path}.username"), true);
    let mut uses_email = false;
    if let Some(Source::Expression(e)) = &username {
        uses_email = e.reads_claim("email");
        uses_email_verified |= e.reads_claim("email_verified");
    }
    let groups = prefixed(errs, &m.groups, &format!("{path}.groups"), false);
    let uid = match (m.uid.claim.is_empty(), m.uid.expression.is_empty()) {
        (false, false) => {
            let detail = "claim and expression can't both be set";
            errs.invalid(&format!("{path}.uid"), "", detail);
            None
        }
        (false, true) => Some(Source::Claim {
            claim: m.uid.claim.clone(),
            prefix: String::new(),
        }),
        (true, false) => {
            let uid_path = format!("{path}.uid.expression");
            let compiled = errs.compile(&uid_path, &m.uid.expression, Scope::Claims);
            compiled.map(Source::Expression)
        }
        (true, true) => None,
    };
    let mut extra = Vec::new();
    let mut seen_keys = HashSet::new();
    for (i, mapping) in m.extra.iter().enumerate() {
        let path = format!("{path}.extra[{i}]");
        let key_path = format!("{path}.key");
        field::domain_prefixed_path(errs, &key_path, &mapping.key);
        if mapping.key != mapping.key.to_lowercase() {
            errs.invalid(&key_path, &mapping.key, "must be lowercase");
        }
        if field::is_kubernetes_domain(&mapping.key) {
            let detail =
                "k8s.io, kubernetes.io and their subdomains are reserved for Kubernetes use";
            errs.invalid(&key_path, &mapping.key, detail);
        }
        if !seen_keys.insert(mapping.key.as_str()) {
            errs.duplicate(&key_path, &mapping.key);
            continue;
        }
        let value_path = format!("{path}.valueExpression");
        if mapping.value_expression.is_empty() {
            errs.required(&value_path, "");
            continue;
        }
        let source = &mapping.value_expression;
        if let Some(expression) = errs.compile(&value_path, source, Scope::Claims) {
            uses_email_verified |= expression.reads_claim("email_verified");
            extra.push((mapping.key.clone(), expression));
        }
    }
    if uses_email && !uses_email_verified {
        let detail = "claims.email_verified must be used in claimMappings.username.expression or claimMappings.extra[*].valueExpression or claimValidationRules[*].expression when claims.email is used in claimMappings.username.expression";
        let username_path = format!("{path}.username.expression");
        errs.invalid(&username_path, &m.username.expression, detail);
    }
    Mappings {
        username,
        groups,
        uid,
        extra,
    }
}

/// `userValidationRules`.
fn user_validation_rules(
    errs: &mut Errors,
    rules: &[config::UserValidationRule],
    root: &str,
) -> Vec<Rule> {
    let mut compiled = Vec::new();
    let mut seen_expressions = HashSet::new();
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("{root}.userValidationRules[{i}].expression");
        if rule.expression.is_empty() {
            errs.required(&path, "");
        } else if !seen_expressions.insert(rule.expression.as_str()) {
            errs.duplicate(&path, &rule.expression);
        } else if let Some(expression) = errs.compile(&path, &rule.expression, Scope::User) {
            compiled.push(rule_of(expression, &rule.message));
        }
    }
    compiled
}

/// A rule with its message, `expression <expr> returned false` when none was given.
fn rule_of(expression: Expression, message: &str) -> Rule {
    let message = if message.is_empty() {
        format!("expression {} returned false", expression.source())
    } else {
        message.to_string()
    };
    Rule {
        expression,
        message,
    }
}

/// `claimMappings.username` or `.groups`; the source when it is valid and set.
fn prefixed(
    errs: &mut Errors,
    m: &PrefixedClaimOrExpression,
    path: &str,
    required: bool,
) -> Option<Source> {
    let prefix_path = format!("{path}.prefix");
    match (m.claim.is_empty(), m.expression.is_empty()) {
        (false, false) => errs.invalid(path, "", "claim and expression can't both be set"),
        (true, true) if required => errs.required(path, "claim or expression is required"),
        (true, true) => {}
        (true, false) => {
            if let Some(prefix) = &m.prefix {
                errs.invalid(
                    &prefix_path,
                    prefix,
                    "may not be specified when expression is set",
                );
            }
            return errs
                .compile(&format!("{path}.expression"), &m.expression, Scope::Claims)
                .map(Source::Expression);
        }
        (false, true) => match &m.prefix {
            None => {
                let detail = "prefix is required when claim is set. It can be set to an empty string to disable prefixing";
                errs.required(&prefix_path, detail);
            }
            Some(prefix) if prefix.starts_with(RESERVED_PREFIX) => {
                let detail = "must not start with \"system:\" (reserved for Kubernetes identities)";
                errs.invalid(&prefix_path, prefix, detail);
            }
            Some(prefix) => {
                return Some(Source::Claim {
                    claim: m.claim.clone(),
                    prefix: prefix.clone(),
                })
            }
        },
    }
    None
}

#[cfg(test)]
mod tests;
