//! From a verified token's claims to a user, as kube-apiserver's JWT authenticator maps them:
//! required claims and claim rules first, then username, groups, uid and extra, then the user
//! rules. Every refusal says why for the log; callers only ever see 401. One rule of apiagg's
//! own: a mapped username or group in the reserved `system:` namespace is refused, so no
//! issuer, prefix or expression can make a token `system:masters`, a node or one of this
//! cluster's service accounts (map another cluster's service accounts under a prefix).

use std::collections::BTreeMap;
use std::time::SystemTime;

use cel::Value as Cel;
use serde_json::{Map, Value};

use crate::expr::{to_cel, Expression};
use crate::jwt::{self, KeyId, KeySet, TokenError, Verified};

/// How one user attribute is read.
#[derive(Debug)]
pub enum Source {
    /// A claim, with a prefix put before each value.
    Claim {
        /// The claim's name.
        claim: String,
        /// The prefix (may be empty).
        prefix: String,
    },
    /// A CEL expression over `claims`.
    Expression(Expression),
}

/// A CEL rule and the message given when it is false.
#[derive(Debug)]
pub struct Rule {
    /// Must evaluate to a bool.
    pub expression: Expression,
    /// Why it failed (`expression <expr> returned false` when no message was given).
    pub message: String,
}

/// One `jwt[i]` issuer, compiled: verifies its tokens and maps them to users.
#[derive(Debug)]
pub struct JwtAuthenticator {
    /// `issuer.url`: the `iss` its tokens carry.
    pub issuer: String,
    /// `issuer.discoveryURL` (empty: `<url>/.well-known/openid-configuration`).
    pub discovery_url: String,
    /// `issuer.certificateAuthority` (PEM; empty: the system's roots).
    pub certificate_authority: String,
    /// `issuer.audiences`.
    pub audiences: Vec<String>,
    /// `claimValidationRules[*]` with `claim`: claim name and required value.
    pub required_claims: Vec<(String, String)>,
    /// `claimValidationRules[*]` with `expression`.
    pub claim_rules: Vec<Rule>,
    /// `claimMappings.username`.
    pub username: Source,
    /// `claimMappings.groups`.
    pub groups: Option<Source>,
    /// `claimMappings.uid` (a claim has no prefix).
    pub uid: Option<Source>,
    /// `claimMappings.extra`: key and value expression.
    pub extra: Vec<(String, Expression)>,
    /// `userValidationRules`.
    pub user_rules: Vec<Rule>,
}

/// A token accepted: its user, when it expires, and the key that signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The mapped user.
    pub identity: Identity,
    /// `exp`.
    pub expires: SystemTime,
    /// The `kid` of the signing key (`None` when the token names none).
    pub kid: Option<String>,
    /// The key that verified it: the token holds only while that key is published.
    pub key: KeyId,
}

/// A mapped user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The username (never empty).
    pub username: String,
    /// The UID (may be empty).
    pub uid: String,
    /// The groups, in the token's order.
    pub groups: Vec<String>,
    /// Extra attributes, keys sorted.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Why a verified token maps to no user. Not retryable with the same token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    /// The token itself does not verify.
    #[error("{0}")]
    Token(#[from] TokenError),
    /// A required claim is missing or has another value.
    #[error("required claim {0} is missing or does not match")]
    RequiredClaim(String),
    /// A claim the mapping reads is missing or not of the right type.
    #[error("claim {claim:?} for {what}: {why}")]
    Claim {
        /// Which attribute was being mapped.
        what: &'static str,
        /// The claim.
        claim: String,
        /// Why.
        why: &'static str,
    },
    /// `email` is the username but `email_verified` is present and not true.
    #[error("email not verified")]
    EmailNotVerified,
    /// An expression failed or gave a value of the wrong type.
    #[error("{what} expression {expression:?}: {why}")]
    Expression {
        /// Which attribute or rule.
        what: &'static str,
        /// The expression.
        expression: String,
        /// Why.
        why: String,
    },
    /// A rule evaluated to false: its message.
    #[error("{0}")]
    Rule(String),
    /// The mapped username is empty.
    #[error("the mapped username is empty")]
    EmptyUsername,
    /// The mapped username or a group is in Kubernetes' reserved `system:` namespace: a token
    /// may never make its bearer `system:masters`, a node or a service account of this cluster.
    #[error("the mapped {what} {name:?} starts with \"system:\", which is reserved")]
    Reserved {
        /// `username` or `group`.
        what: &'static str,
        /// The mapped value.
        name: String,
    },
}

/// Kubernetes' reserved prefix of users and groups.
const RESERVED: &str = "system:";

impl JwtAuthenticator {
    /// Verifies `token` with `keys` and maps it.
    pub fn authenticate(
        &self,
        token: &str,
        keys: &KeySet,
        now: SystemTime,
    ) -> Result<Accepted, MappingError> {
        let Verified {
            claims,
            expires,
            kid,
            key,
        } = jwt::verify(token, keys, &self.issuer, &self.audiences, now)?;
        Ok(Accepted {
            identity: self.map(&claims)?,
            expires,
            kid,
            key,
        })
    }

    /// Maps verified claims to a user.
    pub fn map(&self, claims: &Map<String, Value>) -> Result<Identity, MappingError> {
        for (claim, required) in &self.required_claims {
            if claims.get(claim).and_then(Value::as_str) != Some(required.as_str()) {
                return Err(MappingError::RequiredClaim(claim.clone()));
            }
        }
        let cel_claims = to_cel(&Value::Object(claims.clone()));
        for rule in &self.claim_rules {
            check(rule, &cel_claims, "claimValidationRules")?;
        }
        let username = match &self.username {
            Source::Claim { claim, prefix } => {
                let value = string_claim(claims, claim, "username")?;
                if claim == "email" {
                    match claims.get("email_verified") {
                        None | Some(Value::Bool(true)) => {}
                        Some(_) => return Err(MappingError::EmailNotVerified),
                    }
                }
                format!("{prefix}{value}")
            }
            Source::Expression(e) => string_of(e, &cel_claims, "username")?,
        };
        if username.is_empty() {
            return Err(MappingError::EmptyUsername);
        }
        if username.starts_with(RESERVED) {
            return Err(MappingError::Reserved {
                what: "username",
                name: username,
            });
        }
        let groups = match &self.groups {
            None => Vec::new(),
            Some(Source::Claim { claim, prefix }) => match claims.get(claim) {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::String(one)) => vec![format!("{prefix}{one}")],
                Some(Value::Array(many)) => many
                    .iter()
                    .map(|g| g.as_str().map(|g| format!("{prefix}{g}")))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| wrong(claim, "groups", "not a string or a list of strings"))?,
                Some(_) => return Err(wrong(claim, "groups", "not a string or a list of strings")),
            },
            Some(Source::Expression(e)) => strings_of(e, &cel_claims, "groups")?,
        };
        if let Some(group) = groups.iter().find(|g| g.starts_with(RESERVED)) {
            return Err(MappingError::Reserved {
                what: "group",
                name: group.clone(),
            });
        }
        let uid = match &self.uid {
            None => String::new(),
            Some(Source::Claim { claim, .. }) => string_claim(claims, claim, "uid")?,
            Some(Source::Expression(e)) => string_of(e, &cel_claims, "uid")?,
        };
        let mut extra = BTreeMap::new();
        for (key, expression) in &self.extra {
            let values: Vec<String> = strings_of(expression, &cel_claims, "extra")?
                .into_iter()
                .filter(|v| !v.is_empty())
                .collect();
            if !values.is_empty() {
                extra.insert(key.clone(), values);
            }
        }
        let identity = Identity {
            username,
            uid,
            groups,
            extra,
        };
        if !self.user_rules.is_empty() {
            let user = to_cel(&serde_json::json!({
                "username": identity.username,
                "uid": identity.uid,
                "groups": identity.groups,
                "extra": identity.extra,
            }));
            for rule in &self.user_rules {
                check(rule, &user, "userValidationRules")?;
            }
        }
        Ok(identity)
    }
}

fn wrong(claim: &str, what: &'static str, why: &'static str) -> MappingError {
    MappingError::Claim {
        what,
        claim: claim.to_string(),
        why,
    }
}

fn string_claim(
    claims: &Map<String, Value>,
    claim: &str,
    what: &'static str,
) -> Result<String, MappingError> {
    match claims.get(claim) {
        Some(Value::String(s)) => Ok(s.clone()),
        None => Err(wrong(claim, what, "not present")),
        Some(_) => Err(wrong(claim, what, "not a string")),
    }
}

fn failed(e: &Expression, what: &'static str, why: impl Into<String>) -> MappingError {
    MappingError::Expression {
        what,
        expression: e.source().to_string(),
        why: why.into(),
    }
}

fn check(rule: &Rule, input: &Cel, what: &'static str) -> Result<(), MappingError> {
    match rule.expression.eval(input) {
        Ok(Cel::Bool(true)) => Ok(()),
        Ok(Cel::Bool(false)) => Err(MappingError::Rule(rule.message.clone())),
        Ok(other) => Err(failed(
            &rule.expression,
            what,
            format!("returned {other:?}, not a bool"),
        )),
        Err(e) => Err(failed(&rule.expression, what, e.0)),
    }
}

fn string_of(e: &Expression, claims: &Cel, what: &'static str) -> Result<String, MappingError> {
    match e.eval(claims) {
        Ok(Cel::String(s)) => Ok(s.to_string()),
        Ok(other) => Err(failed(e, what, format!("returned {other:?}, not a string"))),
        Err(err) => Err(failed(e, what, err.0)),
    }
}

/// A string, a list of strings, or null (no values).
fn strings_of(
    e: &Expression,
    claims: &Cel,
    what: &'static str,
) -> Result<Vec<String>, MappingError> {
    match e.eval(claims) {
        Ok(Cel::String(s)) => Ok(vec![s.to_string()]),
        Ok(Cel::Null) => Ok(Vec::new()),
        Ok(Cel::List(items)) => items
            .iter()
            .map(|item| match item {
                Cel::String(s) => Ok(s.to_string()),
                other => Err(failed(
                    e,
                    what,
                    format!("returned a list holding {other:?}"),
                )),
            })
            .collect(),
        Ok(other) => Err(failed(
            e,
            what,
            format!("returned {other:?}, not a string or a list of strings"),
        )),
        Err(err) => Err(failed(e, what, err.0)),
    }
}

#[cfg(test)]
mod tests;
