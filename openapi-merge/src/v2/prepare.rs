//! Per-document work done once, when a document is downloaded: shape checks, the remote's
//! `/apis/<group>/<version>/` filter, reference analysis and the definitions it keeps.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use super::merge::GVK_KEY;
use super::refs::{reach, Reach};
use super::view::DocView;
use crate::error::SpecError;

/// A checked OpenAPI v2 document ready to merge. Preparing fails with a typed error when the
/// document cannot be used; the caller then keeps its last good `PreparedV2` for that input.
#[derive(Debug, Clone)]
pub struct PreparedV2 {
    pub(crate) doc: Arc<Value>,
    /// `false` when `paths` is missing or null: the document contributes nothing.
    pub(crate) has_paths: bool,
    /// Paths the filter keeps, in document order.
    pub(crate) paths: Vec<String>,
    /// Definitions kept with those paths (spec §7.2: what only dropped paths used goes; what no
    /// path ever used stays), in document order.
    pub(crate) definitions: Vec<String>,
    /// Shared parameters kept by the same rule.
    pub(crate) parameters: Vec<String>,
    /// Definitions reached from all paths of the unfiltered document.
    pub(crate) used_definitions: HashSet<String>,
    /// Parameters reached from all paths of the unfiltered document.
    pub(crate) used_parameters: HashSet<String>,
}

impl PreparedV2 {
    /// A delegate (local) document: every path is kept.
    pub fn local(doc: Arc<Value>) -> Result<Self, SpecError> {
        Self::new(doc, None)
    }

    /// A remote APIService's document, filtered to paths under `/apis/<group>/<version>/`
    /// (so the bare `/apis/<group>/<version>` and everything else are dropped, as upstream).
    pub fn remote(doc: Arc<Value>, group: &str, version: &str) -> Result<Self, SpecError> {
        Self::new(doc, Some(&format!("/apis/{group}/{version}/")))
    }

    /// The document as given.
    pub fn doc(&self) -> &Arc<Value> {
        &self.doc
    }

    fn new(doc: Arc<Value>, prefix: Option<&str>) -> Result<Self, SpecError> {
        let view = DocView::new(&doc)?;
        let mut out = Self {
            doc: Arc::clone(&doc),
            has_paths: view.paths.is_some(),
            paths: Vec::new(),
            definitions: Vec::new(),
            parameters: Vec::new(),
            used_definitions: HashSet::new(),
            used_parameters: HashSet::new(),
        };
        if !out.has_paths {
            return Ok(out);
        }
        let mut total = 0usize;
        let mut kept = Vec::new();
        for (path, item) in view.path_items() {
            total += 1;
            if prefix.is_none_or(|p| path.starts_with(p)) {
                kept.push(item);
                out.paths.push(path.to_owned());
            }
        }
        let before = reach(&view, view.path_items().map(|(_, v)| v));
        let after = if kept.len() == total {
            // Nothing dropped: keep everything, and check every reference resolves.
            reach(
                &view,
                kept.iter()
                    .copied()
                    .chain(view.definition_entries().map(|(_, v)| v))
                    .chain(view.parameter_entries().map(|(_, v)| v)),
            )
        } else {
            kept_closure(
                &view,
                &kept,
                |k| before.definitions.contains(k),
                |k| before.parameters.contains(k),
            )
        };
        if let Some(missing) = after.missing {
            return Err(SpecError::DanglingRef {
                reference: missing.to_owned(),
            });
        }
        let keep_def = |k: &&str| after.definitions.contains(k) || !before.definitions.contains(k);
        let keep_param = |k: &&str| after.parameters.contains(k) || !before.parameters.contains(k);
        for (name, def) in view.definition_entries().filter(|(k, _)| keep_def(k)) {
            check_gvk(name, def)?;
            out.definitions.push(name.to_owned());
        }
        out.parameters = view
            .parameter_entries()
            .filter(|(k, _)| keep_param(k))
            .map(|(k, _)| k.to_owned())
            .collect();
        out.used_definitions = before.definitions.iter().map(|k| (*k).to_owned()).collect();
        out.used_parameters = before.parameters.iter().map(|k| (*k).to_owned()).collect();
        Ok(out)
    }
}

/// Reach from the kept path items plus everything no path of the whole document used (so a
/// never-used definition keeps what it references).
pub(crate) fn kept_closure<'a>(
    view: &DocView<'a>,
    kept_items: &[&'a Value],
    used_definition: impl Fn(&str) -> bool,
    used_parameter: impl Fn(&str) -> bool,
) -> Reach<'a> {
    let never_used_defs = view
        .definition_entries()
        .filter(|(k, _)| !used_definition(k));
    let never_used_params = view.parameter_entries().filter(|(k, _)| !used_parameter(k));
    reach(
        view,
        kept_items
            .iter()
            .copied()
            .chain(never_used_defs.map(|(_, v)| v))
            .chain(never_used_params.map(|(_, v)| v)),
    )
}

/// `x-kubernetes-group-version-kind`, when present, must be a list of objects to be mergeable.
fn check_gvk(name: &str, def: &Value) -> Result<(), SpecError> {
    match def.get(GVK_KEY) {
        None => Ok(()),
        Some(Value::Array(items)) if items.iter().all(Value::is_object) => Ok(()),
        Some(_) => Err(SpecError::MalformedGvk {
            name: name.to_owned(),
        }),
    }
}
