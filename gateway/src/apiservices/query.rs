//! List and watch parameters: `labelSelector` (`k=v`, `k==v`, `k!=v`, `k`, `!k`),
//! `fieldSelector` (`metadata.name`), `limit`/`continue`, `resourceVersion`, `watch`,
//! `allowWatchBookmarks`, `sendInitialEvents`; and the write options `fieldManager`, `force`,
//! `fieldValidation` (checked by the strategy crate's `WriteOptions`).

use apiagg_requestinfo::{FieldSelector, QueryParams, SelectorError};
use base64::Engine;
use serde_json::Value;

/// The parameters of one request, read from the request's one parse (first value of each).
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub resource_version: Option<u64>,
    pub labels: Vec<Requirement>,
    /// Every term of `fieldSelector` (all must hold).
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_after: Option<String>,
    pub bookmarks: bool,
    pub send_initial_events: Option<bool>,
    /// `timeoutSeconds` of a watch.
    pub timeout_seconds: Option<u64>,
    /// `fieldManager` of a write.
    pub field_manager: Option<String>,
    /// `force` of an apply, as sent.
    pub force: Option<String>,
    /// `fieldValidation` of a write, as sent (`Strict`, `Warn`, `Ignore`).
    pub field_validation: Option<String>,
    /// `dryRun` of a write, as sent (`All` or refused).
    pub dry_run: Option<String>,
}

/// Why the query cannot be used: 400 `BadRequest`. Not retryable.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// `fieldSelector` does not parse.
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// `fieldSelector` names a field APIServices do not have.
    #[error("field label not supported: {0}")]
    Field(String),
}

/// One label requirement.
#[derive(Debug, Clone)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// A number parameter; absent or unreadable is `None`.
fn number<T: std::str::FromStr>(value: Option<&str>) -> Option<T> {
    QueryParams::decoded(value).and_then(|v| v.parse().ok())
}

/// The `continue` token for a list that stopped after `name`.
pub fn continue_token(name: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(name)
}

impl Query {
    /// The API's parameters from the request's one parse; unknown parameters are ignored.
    pub fn from_params(params: &QueryParams<'_>) -> Result<Query, QueryError> {
        let text = |v: Option<&str>| QueryParams::decoded(v).map(|v| v.into_owned());
        let fields = match text(params.field_selector) {
            Some(selector) => FieldSelector::parse(&selector)?,
            None => FieldSelector::default(),
        };
        if let Some(term) = fields.terms.iter().find(|t| t.field != "metadata.name") {
            return Err(QueryError::Field(term.field.clone()));
        }
        Ok(Query {
            resource_version: number(params.resource_version),
            labels: text(params.label_selector)
                .map(|l| parse_labels(&l))
                .unwrap_or_default(),
            fields,
            limit: number(params.limit),
            continue_after: text(params.continue_token).and_then(|token| {
                base64::engine::general_purpose::STANDARD
                    .decode(token)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
            }),
            bookmarks: QueryParams::flag(params.allow_watch_bookmarks) == Some(true),
            send_initial_events: QueryParams::flag(params.send_initial_events),
            timeout_seconds: number(params.timeout_seconds),
            field_manager: text(params.field_manager),
            force: text(params.force),
            field_validation: text(params.field_validation),
            dry_run: text(params.dry_run),
        })
    }

    /// Whether an object passes the selectors.
    pub fn selects(&self, object: &Value) -> bool {
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        if !self.fields.matches(|_| Some(name)) {
            return false;
        }
        let labels = &object["metadata"]["labels"];
        self.labels.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels[k].as_str() == Some(v),
            Requirement::NotEquals(k, v) => labels[k].as_str() != Some(v),
            Requirement::Exists(k) => labels.get(k).is_some(),
            Requirement::Absent(k) => labels.get(k).is_none(),
        })
    }
}

fn parse_labels(text: &str) -> Vec<Requirement> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = term.strip_prefix('!') {
                Requirement::Absent(k.trim().into())
            } else {
                Requirement::Exists(term.into())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(raw: &str) -> Query {
        Query::from_params(&QueryParams::parse(raw)).expect("query")
    }

    #[test]
    fn selectors() {
        let o = json!({"metadata": {"name": "v1.a.io", "labels": {"team": "x"}}});
        assert!(parse("labelSelector=team%3Dx").selects(&o));
        assert!(!parse("labelSelector=team!%3Dx").selects(&o));
        assert!(parse("labelSelector=!other,team").selects(&o));
        assert!(parse("fieldSelector=metadata.name%3Dv1.a.io").selects(&o));
        assert!(!parse("fieldSelector=metadata.name%3Dv1.b.io").selects(&o));
        let q = parse("watch=true&resourceVersion=12&allowWatchBookmarks=true&limit=5");
        assert!(q.bookmarks);
        assert_eq!((q.resource_version, q.limit), (Some(12), Some(5)));
        let token = continue_token("v1.a.io");
        assert_eq!(
            parse(&format!("continue={token}"))
                .continue_after
                .as_deref(),
            Some("v1.a.io")
        );
        let w = parse("fieldManager=a%2Fb&force=true&fieldValidation=Warn");
        assert_eq!(w.field_manager.as_deref(), Some("a/b"));
        assert_eq!(
            (w.force.as_deref(), w.field_validation.as_deref()),
            (Some("true"), Some("Warn"))
        );
    }

    #[test]
    fn every_field_term_holds_and_only_names_are_fields() {
        let o = json!({"metadata": {"name": "x"}});
        assert!(parse("fieldSelector=metadata.name%3Dx,metadata.name!%3Dy").selects(&o));
        assert!(!parse("fieldSelector=metadata.name%3Dx,metadata.name!%3Dx").selects(&o));
        assert!(
            !parse("fieldSelector=metadata.name%3Dy&fieldSelector=metadata.name%3Dx").selects(&o)
        );
        for bad in ["fieldSelector=spec.group%3Dx", "fieldSelector=nonsense"] {
            assert!(
                Query::from_params(&QueryParams::parse(bad)).is_err(),
                "{bad}"
            );
        }
    }
}
