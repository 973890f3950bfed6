//! Per-document work done once, when a document is downloaded: shape checks, the remote's
//! `/apis/<group>/<version>/` filter, and the definitions and parameters it keeps.

use std::sync::Arc;

use serde_json::Value;

use super::source::{Entry, Reached, SourceDoc};
use crate::error::{Result, SpecError};

/// A checked OpenAPI v2 document ready to merge: a shared [`SourceDoc`] and the part of it one
/// input keeps. Preparing fails with a typed error when the document cannot be used; the caller
/// then keeps its last good `PreparedV2` for that input.
#[derive(Debug, Clone)]
pub struct PreparedV2 {
    pub(crate) doc: Arc<SourceDoc>,
    /// Indices of the paths the filter keeps, in document order.
    pub(crate) paths: Vec<u32>,
    /// Indices of the definitions kept with those paths (as kube-openapi's
    /// `pkg/aggregator/aggregator.go` filters: what only dropped paths used goes; what no path
    /// ever used stays), in document order.
    pub(crate) definitions: Vec<u32>,
    /// Indices of the shared parameters kept by the same rule.
    pub(crate) parameters: Vec<u32>,
}

impl PreparedV2 {
    /// A delegate (local) document: every path is kept.
    pub fn local(doc: &Value) -> Result<Self> {
        Self::local_source(Arc::new(SourceDoc::new(doc)?))
    }

    /// A remote APIService's document, filtered to paths under `/apis/<group>/<version>/`
    /// (so the bare `/apis/<group>/<version>` and everything else are dropped, as upstream).
    pub fn remote(doc: &Value, group: &str, version: &str) -> Result<Self> {
        Self::remote_source(Arc::new(SourceDoc::new(doc)?), group, version)
    }

    /// [`PreparedV2::local`] of a document already in compact form.
    pub fn local_source(doc: Arc<SourceDoc>) -> Result<Self> {
        Self::new(doc, None)
    }

    /// [`PreparedV2::remote`] of a document already in compact form (one `SourceDoc` serves
    /// every APIService of a backend).
    pub fn remote_source(doc: Arc<SourceDoc>, group: &str, version: &str) -> Result<Self> {
        Self::new(doc, Some(&format!("/apis/{group}/{version}/")))
    }

    /// The document, in compact form.
    pub fn doc(&self) -> &Arc<SourceDoc> {
        &self.doc
    }

    fn new(doc: Arc<SourceDoc>, prefix: Option<&str>) -> Result<Self> {
        let mut out = Self {
            doc: Arc::clone(&doc),
            paths: Vec::new(),
            definitions: Vec::new(),
            parameters: Vec::new(),
        };
        if !doc.has_paths {
            return Ok(out);
        }
        out.paths = (0u32..)
            .zip(&doc.paths)
            .filter(|(_, e)| prefix.is_none_or(|p| e.name.starts_with(p)))
            .map(|(i, _)| i)
            .collect();
        let kept = out.paths.iter().filter_map(|i| doc.paths.get(*i as usize));
        let after = if out.paths.len() == doc.paths.len() {
            // Nothing dropped: keep everything, and check every reference resolves.
            doc.reach(kept.chain(&doc.definitions).chain(&doc.parameters))
        } else {
            kept_closure(&doc, kept)
        };
        if let Some(missing) = after.missing {
            return Err(SpecError::DanglingRef {
                reference: missing.to_owned(),
            });
        }
        let keep = |reached: &[bool], used: &[bool], i: usize| {
            reached.get(i).copied().unwrap_or(false) || !used.get(i).copied().unwrap_or(false)
        };
        for (i, def) in (0u32..).zip(&doc.definitions) {
            if keep(&after.definitions, &doc.used_definitions, i as usize) {
                check_gvk(def)?;
                out.definitions.push(i);
            }
        }
        out.parameters = (0u32..)
            .zip(&doc.parameters)
            .filter(|(i, _)| keep(&after.parameters, &doc.used_parameters, *i as usize))
            .map(|(i, _)| i)
            .collect();
        Ok(out)
    }
}

/// Reach from the kept path items plus everything no path of the whole document used (so a
/// never-used definition keeps what it references).
pub(crate) fn kept_closure<'a>(
    doc: &'a SourceDoc,
    kept_items: impl Iterator<Item = &'a Entry>,
) -> Reached<'a> {
    let unused = |entries: &'a [Entry], used: &'a [bool]| {
        entries
            .iter()
            .zip(used)
            .filter(|(_, used)| !**used)
            .map(|(e, _)| e)
    };
    doc.reach(
        kept_items
            .chain(unused(&doc.definitions, &doc.used_definitions))
            .chain(unused(&doc.parameters, &doc.used_parameters)),
    )
}

/// `x-kubernetes-group-version-kind`, when present, must be a list of objects to be mergeable.
fn check_gvk(def: &Entry) -> Result<()> {
    match &def.gvk {
        None => Ok(()),
        Some(Value::Array(items)) if items.iter().all(Value::is_object) => Ok(()),
        Some(_) => Err(SpecError::MalformedGvk {
            name: def.name.to_string(),
        }),
    }
}
