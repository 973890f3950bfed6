//! A webhook's match conditions (`webhook.matchConditions`): CEL over `request`, the
//! SubjectAccessReview's `spec` in v1, compiled at load, all true for the webhook to be asked.
//!
//! As kube-apiserver (`k8s.io/apiserver/pkg/authorization/cel`): conditions are evaluated in
//! order; the first false one skips the webhook even when an earlier one failed (a false wins
//! over errors); otherwise any failure is an error, which the caller turns into the webhook's
//! `failurePolicy` decision. `request` is built as upstream builds it: `user`, `uid`, `groups`
//! and `extra` are always there (empty when unset), and so is every string of
//! `resourceAttributes` or `nonResourceAttributes`, whichever the request has.
//!
//! Differences from upstream, from the `cel` crate: there is no type checker, so a result other
//! than a bool is refused at load only when the expression's shape shows it (a literal, a
//! `size()`, a `.map()`); otherwise it is an evaluation error. The environment is the standard
//! library with the `strings` and `lists` extensions (upstream also has `sets`, `urls`, `ip`,
//! `cidr`, `quantity`, `authz` and more); its cost bound is the estimate of `apiagg_authn::expr`,
//! and each evaluation may build at most 4 MiB (`EVAL_BUDGET`): one that runs out is an error,
//! so the failure policy applies.

use apiagg_authn::expr::{to_cel, CompileError, Expression, Scope};
use serde_json::{json, Map, Value};

/// The most match conditions a webhook may have (upstream's limit).
pub const MAX_MATCH_CONDITIONS: usize = 64;

/// Why a match condition does not compile (the text names the cause; the caller adds the
/// field). Not retryable: the configuration must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    /// Not CEL, another variable than `request`, or too costly.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// Its shape shows a result other than a bool.
    #[error("must evaluate to bool but got {0}")]
    NotBool(&'static str),
}

/// Compiles one condition over `request`.
pub fn compile(source: &str) -> Result<Expression, ConditionError> {
    let expression = Expression::compile(source, Scope::Request)?;
    match expression.known_type() {
        Some(t) if t != "bool" => Err(ConditionError::NotBool(t)),
        _ => Ok(expression),
    }
}

/// Why the conditions could not decide (none was false, at least one failed): each failure,
/// worded as upstream (`cel evaluation error: expression '<expr>' resulted in error: <why>`).
/// Not retryable for this request: the caller applies the webhook's `failurePolicy`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct MatchError(pub Vec<String>);

impl std::fmt::Display for MatchError {
    /// As Go's `utilerrors.NewAggregate`: one error as is, several inside `[...]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_slice() {
            [one] => f.write_str(one),
            many => write!(f, "[{}]", many.join(", ")),
        }
    }
}

/// A webhook's compiled conditions, in the file's order (none: every request matches).
#[derive(Debug, Default)]
pub struct MatchConditions {
    conditions: Vec<Expression>,
}

impl MatchConditions {
    /// Conditions already compiled with [`compile`].
    pub fn new(conditions: Vec<Expression>) -> MatchConditions {
        MatchConditions { conditions }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.conditions.is_empty()
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.conditions.len()
    }

    /// The expressions' texts, in order.
    pub fn sources(&self) -> impl Iterator<Item = &str> {
        self.conditions.iter().map(Expression::source)
    }

    /// Whether the webhook is to be asked about this SubjectAccessReview `spec` (v1 JSON, as
    /// sent to the webhook): `Ok(false)` when a condition is false, `Ok(true)` when all are
    /// true, an error when none is false and one failed.
    pub fn evaluate(&self, review_spec: &Value) -> Result<bool, MatchError> {
        if self.conditions.is_empty() {
            return Ok(true);
        }
        let request = to_cel(&request_variable(review_spec));
        let mut errors = Vec::new();
        for condition in &self.conditions {
            match condition.eval_bool(&request) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => errors.push(format!(
                    "cel evaluation error: expression '{}' resulted in error: {e}",
                    condition.source()
                )),
            }
        }
        if errors.is_empty() {
            Ok(true)
        } else {
            Err(MatchError(errors))
        }
    }
}

/// `request` as upstream's `convertObjectToUnstructured` builds it from the spec: every user
/// field and every attribute string present, a selector as its requirements or, when it has
/// one, its raw text alone.
pub(crate) fn request_variable(spec: &Value) -> Value {
    let string =
        |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    let object = |v: &Value, key: &str| v.get(key).filter(|v| v.is_object()).cloned();
    let mut request = Map::new();
    request.insert("user".into(), json!(string(spec, "user")));
    let groups = spec.get("groups").filter(|g| g.is_array());
    request.insert("groups".into(), groups.cloned().unwrap_or(json!([])));
    request.insert("uid".into(), json!(string(spec, "uid")));
    request.insert("extra".into(), object(spec, "extra").unwrap_or(json!({})));
    if let Some(attributes) = object(spec, "resourceAttributes") {
        let mut out = Map::new();
        for key in [
            "namespace",
            "verb",
            "group",
            "version",
            "resource",
            "subresource",
            "name",
        ] {
            out.insert(key.into(), json!(string(&attributes, key)));
        }
        for key in ["fieldSelector", "labelSelector"] {
            if let Some(selector) = object(&attributes, key).and_then(|s| selector(&s)) {
                out.insert(key.into(), selector);
            }
        }
        request.insert("resourceAttributes".into(), Value::Object(out));
    }
    if let Some(attributes) = object(spec, "nonResourceAttributes") {
        let out = json!({
            "verb": string(&attributes, "verb"),
            "path": string(&attributes, "path"),
        });
        request.insert("nonResourceAttributes".into(), out);
    }
    Value::Object(request)
}

/// A selector as upstream shows it: `rawSelector` when set (alone), else the requirements when
/// there are some, else nothing.
fn selector(selector: &Value) -> Option<Value> {
    let raw = selector.get("rawSelector").and_then(Value::as_str);
    if let Some(raw) = raw.filter(|r| !r.is_empty()) {
        return Some(json!({ "rawSelector": raw }));
    }
    let requirements = selector.get("requirements").and_then(Value::as_array)?;
    if requirements.is_empty() {
        return None;
    }
    let requirements: Vec<Value> = requirements
        .iter()
        .map(|r| {
            let field = |key: &str| r.get(key).and_then(Value::as_str).unwrap_or("");
            let values = r.get("values").filter(|v| v.is_array());
            json!({
                "key": field("key"),
                "operator": field("operator"),
                "values": values.cloned().unwrap_or(json!([])),
            })
        })
        .collect();
    Some(json!({ "requirements": requirements }))
}

#[cfg(test)]
mod tests;
