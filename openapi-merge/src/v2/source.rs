//! One downloaded Swagger 2.0 document in compact form: what the merge reads, kept as compact
//! JSON text per entry (about the size of the download) instead of a parsed tree (several times
//! that), with the references between entries resolved once.

use std::collections::HashMap;

use serde_json::value::{to_raw_value, RawValue};
use serde_json::{Map, Value};

use super::merge::GVK_KEY;
use super::refs::{DEFINITION_PREFIX, PARAMETER_PREFIX};
use super::view::DocView;
use crate::error::{Result, SpecError};

/// Where one `$ref` of an entry points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ref {
    /// The definition at this index.
    Definition(u32),
    /// The shared parameter at this index.
    Parameter(u32),
    /// A `#/definitions/…` or `#/parameters/…` reference the document lacks, as written.
    Missing(Box<str>),
}

/// A path item, definition or shared parameter.
#[derive(Debug)]
pub(crate) struct Entry {
    /// Its key in the section.
    pub name: Box<str>,
    /// The value as compact JSON (what serde_json writes for it).
    pub json: Box<RawValue>,
    /// Every `#/definitions/…` and `#/parameters/…` reference it makes, once each.
    pub refs: Box<[Ref]>,
    /// `x-kubernetes-group-version-kind` of a definition (merged across documents).
    pub gvk: Option<Value>,
}

impl Entry {
    /// The value parsed again (for rewriting or comparing; the text is valid JSON).
    pub fn value(&self) -> Value {
        serde_json::from_str(self.json.get()).unwrap_or(Value::Null)
    }
}

/// A top-level field, in document order.
#[derive(Debug)]
pub(crate) enum Top {
    /// `paths`, `definitions` or `parameters`: written from the merge.
    Section,
    /// Any other field, as compact JSON.
    Other(Box<RawValue>),
}

/// A checked OpenAPI v2 document in compact form, shared by every APIService it serves.
#[derive(Debug)]
pub struct SourceDoc {
    /// Top-level fields in document order.
    pub(crate) root: Vec<(Box<str>, Top)>,
    /// `false` when `paths` is missing or null: the document contributes nothing.
    pub(crate) has_paths: bool,
    /// Path items in document order (vendor extensions dropped: the merge never writes them).
    pub(crate) paths: Vec<Entry>,
    /// Definitions in document order.
    pub(crate) definitions: Vec<Entry>,
    /// Shared parameters in document order.
    pub(crate) parameters: Vec<Entry>,
    /// Definitions reached from all paths.
    pub(crate) used_definitions: Vec<bool>,
    /// Shared parameters reached from all paths.
    pub(crate) used_parameters: Vec<bool>,
}

impl SourceDoc {
    /// Parses a downloaded document; the parsed tree is dropped once the compact form is built.
    pub fn from_slice(json: &[u8]) -> Result<SourceDoc> {
        let value: Value =
            serde_json::from_slice(json).map_err(|e| SpecError::NotJson(e.to_string()))?;
        SourceDoc::new(&value)
    }

    /// Checks the document's shape (an object whose sections are objects of objects) and
    /// builds the compact form.
    pub fn new(doc: &Value) -> Result<SourceDoc> {
        let view = DocView::new(doc)?;
        let (definition_index, parameter_index) = (index(view.definitions), index(view.parameters));
        let entry = |name: &str, value: &Value, gvk: bool| Entry {
            name: name.into(),
            json: compact(value),
            refs: refs_of(value, &definition_index, &parameter_index),
            gvk: gvk.then(|| value.get(GVK_KEY).cloned()).flatten(),
        };
        let paths: Vec<Entry> = view.path_items().map(|(k, v)| entry(k, v, false)).collect();
        let definitions = view.definition_entries().map(|(k, v)| entry(k, v, true));
        let parameters = view.parameter_entries().map(|(k, v)| entry(k, v, false));
        let root = view
            .root
            .iter()
            .map(|(key, value)| {
                let top = match key.as_str() {
                    "paths" | "definitions" | "parameters" => Top::Section,
                    _ => Top::Other(compact(value)),
                };
                (key.as_str().into(), top)
            })
            .collect();
        let mut out = SourceDoc {
            root,
            has_paths: view.paths.is_some(),
            paths,
            definitions: definitions.collect(),
            parameters: parameters.collect(),
            used_definitions: Vec::new(),
            used_parameters: Vec::new(),
        };
        let used = out.reach(out.paths.iter());
        let (definitions, parameters) = (used.definitions, used.parameters);
        out.used_definitions = definitions;
        out.used_parameters = parameters;
        Ok(out)
    }

    /// Definitions and parameters reached (transitively) from `roots`.
    pub(crate) fn reach<'a>(&'a self, roots: impl Iterator<Item = &'a Entry>) -> Reached<'a> {
        let mut out = Reached {
            definitions: vec![false; self.definitions.len()],
            parameters: vec![false; self.parameters.len()],
            missing: None,
        };
        let mut stack: Vec<&'a Entry> = roots.collect();
        while let Some(entry) = stack.pop() {
            for r in entry.refs.iter() {
                let (seen, section, i) = match r {
                    Ref::Definition(i) => (&mut out.definitions, &self.definitions, *i as usize),
                    Ref::Parameter(i) => (&mut out.parameters, &self.parameters, *i as usize),
                    Ref::Missing(reference) => {
                        out.missing.get_or_insert(&**reference);
                        continue;
                    }
                };
                if let (Some(flag), Some(target)) = (seen.get_mut(i), section.get(i)) {
                    if !*flag {
                        *flag = true;
                        stack.push(target);
                    }
                }
            }
        }
        out
    }

    /// The document as a tree again (path vendor extensions excluded); for tests and tools.
    pub fn to_value(&self) -> Value {
        let section = |entries: &[Entry]| {
            let map = entries.iter().map(|e| (e.name.to_string(), e.value()));
            Value::Object(map.collect())
        };
        let root = self.root.iter().map(|(key, top)| {
            let value = match (top, key.as_ref()) {
                (Top::Other(raw), _) => serde_json::from_str(raw.get()).unwrap_or(Value::Null),
                (Top::Section, "paths") if self.has_paths => section(&self.paths),
                (Top::Section, "definitions") => section(&self.definitions),
                (Top::Section, "parameters") => section(&self.parameters),
                (Top::Section, _) => Value::Null,
            };
            (key.to_string(), value)
        });
        Value::Object(root.collect())
    }
}

/// What [`SourceDoc::reach`] found, by index.
pub(crate) struct Reached<'a> {
    pub definitions: Vec<bool>,
    pub parameters: Vec<bool>,
    /// The first missing reference met.
    pub missing: Option<&'a str>,
}

/// Position of every key of a section.
fn index(section: Option<&Map<String, Value>>) -> HashMap<&str, u32> {
    let names = section.into_iter().flat_map(|m| m.keys());
    names.zip(0u32..).map(|(k, i)| (k.as_str(), i)).collect()
}

/// Compact JSON text of a value (serialising a `Value` cannot fail: its keys are strings).
fn compact(value: &Value) -> Box<RawValue> {
    to_raw_value(value).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// Every definition and parameter reference in `value` (anywhere), once each, in the order met.
fn refs_of(
    value: &Value,
    definitions: &HashMap<&str, u32>,
    parameters: &HashMap<&str, u32>,
) -> Box<[Ref]> {
    let mut out: Vec<Ref> = Vec::new();
    let mut stack = vec![value];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    match child {
                        Value::String(target) if key == "$ref" => {
                            let r = if let Some(name) = target.strip_prefix(DEFINITION_PREFIX) {
                                definitions.get(name).map(|i| Ref::Definition(*i))
                            } else if let Some(name) = target.strip_prefix(PARAMETER_PREFIX) {
                                parameters.get(name).map(|i| Ref::Parameter(*i))
                            } else {
                                continue;
                            };
                            let r = r.unwrap_or_else(|| Ref::Missing(target.as_str().into()));
                            if !out.contains(&r) {
                                out.push(r);
                            }
                        }
                        Value::Object(_) | Value::Array(_) => stack.push(child),
                        _ => {}
                    }
                }
            }
            Value::Array(items) => stack.extend(items.iter().rev()),
            _ => {}
        }
    }
    out.into_boxed_slice()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_are_resolved_once_and_reach_is_transitive() {
        let doc = json!({
            "swagger": "2.0",
            "paths": {"/a": {"get": {"parameters": [{"$ref": "#/parameters/p"}]}}, "x-e": 1},
            "parameters": {"p": {"in": "body", "name": "body", "schema": {"$ref": "#/definitions/A"}}},
            "definitions": {
                "A": {"properties": {"b": {"items": {"$ref": "#/definitions/B"}}, "c": {"$ref": "#/definitions/B"}}},
                "B": {"type": "string"},
                "C": {"$ref": "#/definitions/Missing"}
            }
        });
        let source = SourceDoc::new(&doc).unwrap();
        assert_eq!(source.paths.len(), 1, "vendor extensions are no paths");
        assert_eq!(&*source.definitions[0].refs, &[Ref::Definition(1)]);
        assert_eq!(source.used_definitions, vec![true, true, false]);
        assert_eq!(source.used_parameters, vec![true]);
        let all = source.reach(source.definitions.iter());
        assert_eq!(all.missing, Some("#/definitions/Missing"));
        let mut expected = doc.clone();
        expected["paths"].as_object_mut().unwrap().remove("x-e");
        assert_eq!(source.to_value(), expected);
    }
}
