//! A validated, borrowed view of one Swagger 2.0 document's merge-relevant sections.

use serde_json::{Map, Value};

use crate::error::{Result, SpecError};

/// Borrowed sections of one input document. `None` means the section is missing or `null`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DocView<'a> {
    /// The whole document (the first usable one provides `info`, `swagger`, `security`, …).
    pub root: &'a Map<String, Value>,
    /// `paths`; keys starting with `x-` are vendor extensions, not paths.
    pub paths: Option<&'a Map<String, Value>>,
    /// `definitions`.
    pub definitions: Option<&'a Map<String, Value>>,
    /// `parameters` (shared parameters, referenced as `#/parameters/<name>`).
    pub parameters: Option<&'a Map<String, Value>>,
}

impl<'a> DocView<'a> {
    /// Checks the document's shape: an object whose sections are objects of objects.
    pub fn new(doc: &'a Value) -> Result<Self> {
        let root = doc.as_object().ok_or(SpecError::NotAnObject)?;
        Ok(Self {
            root,
            paths: section(root, "paths", true)?,
            definitions: section(root, "definitions", false)?,
            parameters: section(root, "parameters", false)?,
        })
    }

    /// Path items in document order, without vendor extensions.
    pub fn path_items(&self) -> impl Iterator<Item = (&'a str, &'a Value)> {
        self.paths
            .into_iter()
            .flat_map(|m| m.iter())
            .filter(|(k, _)| !is_extension(k))
            .map(|(k, v)| (k.as_str(), v))
    }

    /// Definitions in document order.
    pub fn definition_entries(&self) -> impl Iterator<Item = (&'a str, &'a Value)> {
        entries(self.definitions)
    }

    /// Shared parameters in document order.
    pub fn parameter_entries(&self) -> impl Iterator<Item = (&'a str, &'a Value)> {
        entries(self.parameters)
    }
}

fn entries(map: Option<&Map<String, Value>>) -> impl Iterator<Item = (&str, &Value)> {
    map.into_iter()
        .flat_map(|m| m.iter())
        .map(|(k, v)| (k.as_str(), v))
}

/// Whether a key is a vendor extension (`x-…`).
pub(crate) fn is_extension(key: &str) -> bool {
    key.starts_with("x-")
}

fn section<'a>(
    root: &'a Map<String, Value>,
    name: &'static str,
    skip_extensions: bool,
) -> Result<Option<&'a Map<String, Value>>> {
    let map = match root.get(name) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(SpecError::SectionNotObject { section: name }),
    };
    for (key, value) in map {
        if skip_extensions && is_extension(key) {
            continue;
        }
        if !value.is_object() {
            return Err(SpecError::EntryNotObject {
                section: name,
                name: key.clone(),
            });
        }
    }
    Ok(Some(map))
}
