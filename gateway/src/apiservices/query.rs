//! List and watch parameters: `labelSelector` (`k=v`, `k==v`, `k!=v`, `k`, `!k`),
//! `fieldSelector` (`metadata.name`), `limit`/`continue`, `resourceVersion`, `watch`,
//! `allowWatchBookmarks`, `sendInitialEvents`; and the write options `fieldManager`, `force`,
//! `fieldValidation` (checked by the config crate's `WriteOptions`).

use base64::Engine;
use serde_json::Value;

/// The parameters of one request.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub watch: bool,
    pub resource_version: Option<u64>,
    pub labels: Vec<Requirement>,
    pub name: Option<(String, bool)>,
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
}

/// One label requirement.
#[derive(Debug, Clone)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

fn decode(value: &str) -> String {
    url::form_urlencoded::parse(format!("v={value}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// The `continue` token for a list that stopped after `name`.
pub fn continue_token(name: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(name)
}

impl Query {
    /// Parses a raw query string; unknown parameters are ignored.
    pub fn parse(raw: &str) -> Query {
        let mut q = Query::default();
        for (key, value) in url::form_urlencoded::parse(raw.as_bytes()) {
            let value = value.into_owned();
            match key.as_ref() {
                "watch" => q.watch = value == "true" || value == "1",
                "resourceVersion" => q.resource_version = value.parse().ok(),
                "labelSelector" => q.labels = parse_labels(&value),
                "fieldSelector" => {
                    for term in value.split(',') {
                        if let Some(v) = term.strip_prefix("metadata.name!=") {
                            q.name = Some((decode(v), false));
                        } else if let Some(v) = term
                            .strip_prefix("metadata.name==")
                            .or_else(|| term.strip_prefix("metadata.name="))
                        {
                            q.name = Some((decode(v), true));
                        }
                    }
                }
                "limit" => q.limit = value.parse().ok(),
                "continue" => {
                    q.continue_after = base64::engine::general_purpose::STANDARD
                        .decode(&value)
                        .ok()
                        .and_then(|b| String::from_utf8(b).ok())
                }
                "allowWatchBookmarks" => q.bookmarks = value == "true",
                "sendInitialEvents" => q.send_initial_events = Some(value == "true"),
                "timeoutSeconds" => q.timeout_seconds = value.parse().ok(),
                "fieldManager" => q.field_manager = Some(value),
                "force" => q.force = Some(value),
                "fieldValidation" => q.field_validation = Some(value),
                _ => {}
            }
        }
        q
    }

    /// Whether an object passes the selectors.
    pub fn selects(&self, object: &Value) -> bool {
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        if let Some((wanted, equal)) = &self.name {
            if (name == wanted) != *equal {
                return false;
            }
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

    #[test]
    fn selectors() {
        let o = json!({"metadata": {"name": "v1.a.io", "labels": {"team": "x"}}});
        assert!(Query::parse("labelSelector=team%3Dx").selects(&o));
        assert!(!Query::parse("labelSelector=team!%3Dx").selects(&o));
        assert!(Query::parse("labelSelector=!other,team").selects(&o));
        assert!(Query::parse("fieldSelector=metadata.name%3Dv1.a.io").selects(&o));
        assert!(!Query::parse("fieldSelector=metadata.name%3Dv1.b.io").selects(&o));
        let q = Query::parse("watch=true&resourceVersion=12&allowWatchBookmarks=true&limit=5");
        assert!(q.watch && q.bookmarks);
        assert_eq!((q.resource_version, q.limit), (Some(12), Some(5)));
        let token = continue_token("v1.a.io");
        assert_eq!(
            Query::parse(&format!("continue={token}"))
                .continue_after
                .as_deref(),
            Some("v1.a.io")
        );
        let w = Query::parse("fieldManager=a%2Fb&force=true&fieldValidation=Warn");
        assert_eq!(w.field_manager.as_deref(), Some("a/b"));
        assert_eq!(
            (w.force.as_deref(), w.field_validation.as_deref()),
            (Some("true"), Some("Warn"))
        );
    }
}
