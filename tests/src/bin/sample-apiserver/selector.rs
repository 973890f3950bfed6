//! Label selectors as kube-apiserver reads them (`labelSelector`): comma-separated requirements
//! `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Exists(String),
    Absent(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed selector; empty selects everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selector(Vec<Requirement>);

/// Splits on commas outside parentheses.
fn requirements(text: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

fn values(list: &str) -> Result<Vec<String>, String> {
    let inner = list
        .trim()
        .strip_prefix('(')
        .and_then(|l| l.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised list, got {list:?}"))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
}

impl Selector {
    /// Parses the (already decoded) `labelSelector` value.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut out = Vec::new();
        for part in requirements(text)
            .into_iter()
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let requirement = if let Some(key) = part.strip_prefix('!') {
                Requirement::Absent(key.trim().into())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotIn(k.trim().into(), vec![v.trim().into()])
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::In(k.trim().into(), vec![v.trim().into()])
            } else if let Some((k, list)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), values(list)?)
            } else if let Some((k, list)) = part.split_once(" in ") {
                Requirement::In(k.trim().into(), values(list)?)
            } else if part.contains(char::is_whitespace) {
                return Err(format!("unable to parse requirement: {part:?}"));
            } else {
                Requirement::Exists(part.into())
            };
            out.push(requirement);
        }
        Ok(Selector(out))
    }

    /// Whether an object's labels match every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let label = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::Absent(k) => label(k).is_none(),
            Requirement::In(k, vs) => label(k).is_some_and(|v| vs.iter().any(|w| w == v)),
            Requirement::NotIn(k, vs) => label(k).is_none_or(|v| !vs.iter().any(|w| w == v)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requirements_match_like_kube() {
        let obj =
            json!({"metadata": {"labels": {"kubernetes.io/service-name": "api", "tier": "x"}}});
        for (text, expected) in [
            ("", true),
            ("kubernetes.io/service-name", true),
            ("!kubernetes.io/service-name", false),
            ("kubernetes.io/service-name=api", true),
            ("kubernetes.io/service-name==web", false),
            ("tier!=x", false),
            ("kubernetes.io/service-name in (web, api),tier", true),
            ("kubernetes.io/service-name notin (api)", false),
            ("missing!=x", true),
        ] {
            assert_eq!(
                Selector::parse(text).expect(text).matches(&obj),
                expected,
                "{text}"
            );
        }
        assert!(Selector::parse("a b").is_err());
    }
}
