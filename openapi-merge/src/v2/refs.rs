//! `$ref` handling: which definitions and parameters a set of roots reaches, and renames.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::view::DocView;

/// Prefix of a reference to a definition.
pub(crate) const DEFINITION_PREFIX: &str = "#/definitions/";
/// Prefix of a reference to a shared parameter.
pub(crate) const PARAMETER_PREFIX: &str = "#/parameters/";

/// Renames for one source document: full old reference → full new reference.
pub(crate) type Renames = HashMap<String, String>;

/// Definitions and parameters reached (transitively) from some roots.
#[derive(Debug, Default)]
pub(crate) struct Reach<'a> {
    /// Names of reached definitions.
    pub definitions: HashSet<&'a str>,
    /// Names of reached shared parameters.
    pub parameters: HashSet<&'a str>,
    /// The first `#/definitions/…` or `#/parameters/…` reference whose target is missing.
    pub missing: Option<&'a str>,
}

/// Walks `roots` and everything they reference inside `view`. Any `"$ref": "<string>"` counts,
/// wherever it sits; references of other kinds (`#/responses/…`, external URLs) are left alone.
pub(crate) fn reach<'a>(
    view: &DocView<'a>,
    roots: impl IntoIterator<Item = &'a Value>,
) -> Reach<'a> {
    let mut out = Reach::default();
    let mut stack: Vec<&'a Value> = roots.into_iter().collect();
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    match child {
                        Value::String(target) if key == "$ref" => {
                            follow(view, target, &mut out, &mut stack);
                        }
                        Value::Object(_) | Value::Array(_) => stack.push(child),
                        _ => {}
                    }
                }
            }
            Value::Array(items) => {
                stack.extend(items.iter().filter(|v| v.is_object() || v.is_array()));
            }
            _ => {}
        }
    }
    out
}

fn follow<'a>(
    view: &DocView<'a>,
    target: &'a str,
    out: &mut Reach<'a>,
    stack: &mut Vec<&'a Value>,
) {
    let (name, section, seen) = if let Some(name) = target.strip_prefix(DEFINITION_PREFIX) {
        (name, view.definitions, &mut out.definitions)
    } else if let Some(name) = target.strip_prefix(PARAMETER_PREFIX) {
        (name, view.parameters, &mut out.parameters)
    } else {
        return;
    };
    if !seen.insert(name) {
        return;
    }
    match section.and_then(|m| m.get(name)) {
        Some(found) => stack.push(found),
        None => {
            if out.missing.is_none() {
                out.missing = Some(target);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reach_is_transitive_through_definitions_and_parameters() {
        let doc = json!({
            "paths": {"/a": {"get": {"parameters": [{"$ref": "#/parameters/p"}]}}},
            "parameters": {"p": {"in": "body", "name": "body", "schema": {"$ref": "#/definitions/A"}}},
            "definitions": {
                "A": {"properties": {"b": {"items": {"$ref": "#/definitions/B"}}}},
                "B": {"type": "string"},
                "C": {"$ref": "#/definitions/Missing"}
            }
        });
        let view = DocView::new(&doc).unwrap();
        let r = reach(&view, view.path_items().map(|(_, v)| v));
        assert_eq!(r.parameters, HashSet::from(["p"]));
        assert_eq!(r.definitions, HashSet::from(["A", "B"]));
        assert_eq!(r.missing, None);
        let r = reach(&view, view.definition_entries().map(|(_, v)| v));
        assert_eq!(r.missing, Some("#/definitions/Missing"));
    }
}
