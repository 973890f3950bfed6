//! The merge state: paths, definitions and parameters borrowed from the inputs, plus the
//! per-input reference renames applied when rendering (kube-openapi's
//! `pkg/aggregator/aggregator.go`).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::prepare::{kept_closure, PreparedV2};
use super::refs::{Renames, DEFINITION_PREFIX, PARAMETER_PREFIX};
use super::source::{Entry, SourceDoc};

/// Vendor extension listing the kinds a definition describes; ignored when comparing.
pub(crate) const GVK_KEY: &str = "x-kubernetes-group-version-kind";

/// A definition in the result.
#[derive(Debug)]
pub(crate) struct OutDefinition<'a> {
    /// Index of the source whose renames apply to `entry`.
    pub source: usize,
    /// The definition as written in its source.
    pub entry: &'a Entry,
    /// Replacement `x-kubernetes-group-version-kind` after merging identical definitions.
    pub gvk: Option<Value>,
}

/// Borrowed merge result, rendered by `render`.
#[derive(Debug, Default)]
pub(crate) struct Merger<'a> {
    /// The first usable document: everything but `paths`, `definitions`, `parameters` comes from it.
    pub base: Option<&'a SourceDoc>,
    /// Path → (source index, path item).
    pub paths: HashMap<&'a str, (usize, &'a Entry)>,
    /// Final definition name → definition.
    pub definitions: HashMap<Cow<'a, str>, OutDefinition<'a>>,
    /// Final parameter name → (source index, parameter).
    pub parameters: HashMap<Cow<'a, str>, (usize, &'a Entry)>,
    /// Per source index: reference renames to apply when rendering its values.
    pub renames: Vec<Renames>,
}

/// What one input contributes after path conflicts are resolved.
struct Kept<'a> {
    paths: Vec<&'a Entry>,
    definitions: Vec<&'a Entry>,
    parameters: Vec<&'a Entry>,
}

impl<'a> Merger<'a> {
    /// Adds one prepared input: its paths that no earlier input has, what those paths need, and
    /// the renames that keep its references pointing at its own definitions.
    pub fn add(&mut self, spec: &'a PreparedV2) {
        if let Some(kept) = self.keep(spec) {
            self.insert(kept);
        }
        self.base.get_or_insert(&*spec.doc);
    }

    fn insert(&mut self, kept: Kept<'a>) {
        let source = self.renames.len();
        let mut renames = Renames::new();
        self.rename_definitions(&kept, &mut renames);
        self.rename_parameters(&kept, &mut renames);
        for def in &kept.definitions {
            let name = renamed(&renames, DEFINITION_PREFIX, &def.name);
            match self.definitions.get_mut(name.as_ref()) {
                Some(existing) => {
                    // Equal (ignoring the GVK list) to what is there: the GVK lists are unioned.
                    let current = existing.gvk.as_ref().or(existing.entry.gvk.as_ref());
                    if let Some(merged) = merge_gvks(current, def.gvk.as_ref()) {
                        existing.gvk = Some(merged);
                    }
                }
                None => {
                    self.definitions.insert(
                        name,
                        OutDefinition {
                            source,
                            entry: def,
                            gvk: None,
                        },
                    );
                }
            }
        }
        for param in &kept.parameters {
            let name = renamed(&renames, PARAMETER_PREFIX, &param.name);
            self.parameters.entry(name).or_insert((source, param));
        }
        for path in kept.paths {
            self.paths.insert(&path.name, (source, path));
        }
        self.renames.push(renames);
    }

    /// The paths of `spec` no earlier input has and the definitions and parameters they need;
    /// `None` when it contributes no path.
    fn keep(&self, spec: &'a PreparedV2) -> Option<Kept<'a>> {
        let doc: &'a SourceDoc = &spec.doc;
        if !doc.has_paths {
            return None;
        }
        let pick = |indices: &'a [u32], section: &'a [Entry]| {
            indices.iter().filter_map(move |i| section.get(*i as usize))
        };
        let paths: Vec<&'a Entry> = pick(&spec.paths, &doc.paths)
            .filter(|p| !self.paths.contains_key(&*p.name))
            .collect();
        if paths.is_empty() {
            return None;
        }
        if paths.len() == spec.paths.len() {
            return Some(Kept {
                paths,
                definitions: pick(&spec.definitions, &doc.definitions).collect(),
                parameters: pick(&spec.parameters, &doc.parameters).collect(),
            });
        }
        // Some paths lost to earlier inputs: keep only what the remaining ones reach (plus what
        // no path of the document ever used).
        let after = kept_closure(doc, paths.iter().copied());
        let keep = |reached: &[bool], used: &[bool], i: &u32| {
            let i = *i as usize;
            reached.get(i).copied().unwrap_or(false) || !used.get(i).copied().unwrap_or(false)
        };
        let definitions = spec
            .definitions
            .iter()
            .filter(|i| keep(&after.definitions, &doc.used_definitions, i))
            .filter_map(|i| doc.definitions.get(*i as usize))
            .collect();
        let parameters = spec
            .parameters
            .iter()
            .filter(|i| keep(&after.parameters, &doc.used_parameters, i))
            .filter_map(|i| doc.parameters.get(*i as usize))
            .collect();
        Some(Kept {
            paths,
            definitions,
            parameters,
        })
    }

    /// Renames each kept definition that differs (ignoring the GVK list) from the one already
    /// merged under its name: to the first `<name>_vN` that is free or holds an equal one.
    fn rename_definitions(&self, kept: &Kept<'a>, renames: &mut Renames) {
        let mut source_names: Option<HashSet<&str>> = None;
        let mut assigned: HashSet<String> = HashSet::new();
        for def in &kept.definitions {
            let Some(existing) = self.definitions.get(&*def.name) else {
                continue;
            };
            if same_ignoring_gvk(existing.entry, def) {
                continue;
            }
            let names = source_names
                .get_or_insert_with(|| kept.definitions.iter().map(|d| &*d.name).collect());
            let target = pick_name(
                &def.name,
                |candidate| {
                    self.definitions
                        .get(candidate)
                        .map(|d| same_ignoring_gvk(d.entry, def))
                },
                |candidate| assigned.contains(candidate) || names.contains(candidate),
            );
            assigned.insert(target.clone());
            renames.insert(
                format!("{DEFINITION_PREFIX}{}", def.name),
                format!("{DEFINITION_PREFIX}{target}"),
            );
        }
    }

    /// The same for shared parameters, compared whole.
    fn rename_parameters(&self, kept: &Kept<'a>, renames: &mut Renames) {
        let mut source_names: Option<HashSet<&str>> = None;
        let mut assigned: HashSet<String> = HashSet::new();
        for param in &kept.parameters {
            let Some((_, existing)) = self.parameters.get(&*param.name) else {
                continue;
            };
            if same_value(existing, param) {
                continue;
            }
            let names = source_names
                .get_or_insert_with(|| kept.parameters.iter().map(|p| &*p.name).collect());
            let target = pick_name(
                &param.name,
                |candidate| {
                    self.parameters
                        .get(candidate)
                        .map(|(_, p)| same_value(p, param))
                },
                |candidate| assigned.contains(candidate) || names.contains(candidate),
            );
            assigned.insert(target.clone());
            renames.insert(
                format!("{PARAMETER_PREFIX}{}", param.name),
                format!("{PARAMETER_PREFIX}{target}"),
            );
        }
    }
}

/// Whether two entries hold equal values: the same text, or equal once parsed (object key
/// order does not count).
fn same_value(a: &Entry, b: &Entry) -> bool {
    a.json.get() == b.json.get() || a.value() == b.value()
}

/// [`equal_ignoring_gvk`] of two entries, without parsing them when their text is the same.
fn same_ignoring_gvk(a: &Entry, b: &Entry) -> bool {
    a.json.get() == b.json.get() || equal_ignoring_gvk(&a.value(), &b.value())
}

/// The name `name` takes in the result, after this source's renames.
fn renamed<'a>(renames: &Renames, prefix: &str, name: &'a str) -> Cow<'a, str> {
    if renames.is_empty() {
        return Cow::Borrowed(name);
    }
    match renames.get(&format!("{prefix}{name}")) {
        Some(new_ref) => Cow::Owned(new_ref.strip_prefix(prefix).unwrap_or(new_ref).to_owned()),
        None => Cow::Borrowed(name),
    }
}

/// Upstream's renaming: walk `_v2`, `_v3`, … while taken in the result; reuse a taken name whose
/// content is equal (`existing` returns `Some(equal)` for taken names); otherwise continue past
/// names already used by this source, and take the first free one.
fn pick_name(
    name: &str,
    existing: impl Fn(&str) -> Option<bool>,
    used_by_source: impl Fn(&str) -> bool,
) -> String {
    let mut i = 2u32;
    let mut candidate = format!("{name}_v{i}");
    while let Some(equal) = existing(&candidate) {
        if equal {
            return candidate;
        }
        i += 1;
        candidate = format!("{name}_v{i}");
    }
    while used_by_source(&candidate) || existing(&candidate).is_some() {
        i += 1;
        candidate = format!("{name}_v{i}");
    }
    candidate
}

/// Deep equality that ignores `x-kubernetes-group-version-kind` at the definition's top level.
pub(crate) fn equal_ignoring_gvk(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let count = |m: &Map<String, Value>| m.len() - usize::from(m.contains_key(GVK_KEY));
            count(a) == count(b)
                && a.iter()
                    .filter(|(k, _)| *k != GVK_KEY)
                    .all(|(k, v)| b.get(k) == Some(v))
        }
        _ => a == b,
    }
}

/// The union of two GVK lists, sorted by `group/version.kind`, when `incoming` adds to
/// `existing` (or `existing` has none); `None` when nothing changes. Lists were checked to be
/// arrays when prepared; anything else counts as empty.
fn merge_gvks(existing: Option<&Value>, incoming: Option<&Value>) -> Option<Value> {
    let incoming = incoming?;
    let Some(existing) = existing else {
        return Some(incoming.clone());
    };
    let list = |v: &'_ Value| v.as_array().cloned().unwrap_or_default();
    let mut keyed: Vec<(String, Value)> = list(existing)
        .into_iter()
        .map(|g| (gvk_key(&g), g))
        .collect();
    let mut changed = false;
    for gvk in list(incoming) {
        let key = gvk_key(&gvk);
        if !keyed.iter().any(|(k, _)| *k == key) {
            keyed.push((key, gvk));
            changed = true;
        }
    }
    if !changed {
        return None;
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    Some(Value::Array(keyed.into_iter().map(|(_, v)| v).collect()))
}

fn gvk_key(gvk: &Value) -> String {
    let field = |k: &str| gvk.get(k).and_then(Value::as_str).unwrap_or_default();
    format!("{}/{}.{}", field("group"), field("version"), field("kind"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gvk_lists_are_unioned_and_sorted_when_changed() {
        let a = json!([{"group": "b", "version": "v1", "kind": "X"}]);
        let b = json!([{"group": "a", "version": "v1", "kind": "X"}, {"group": "b", "version": "v1", "kind": "X"}]);
        let merged = merge_gvks(Some(&a), Some(&b)).unwrap();
        assert_eq!(merged[0]["group"], "a");
        assert_eq!(merged.as_array().unwrap().len(), 2);
        assert_eq!(merge_gvks(Some(&b), Some(&a)), None);
        assert_eq!(merge_gvks(None, Some(&a)), Some(a.clone()));
        assert_eq!(merge_gvks(Some(&a), None), None);
    }

    #[test]
    fn equality_ignores_only_the_gvk_extension() {
        let a = json!({"type": "object", GVK_KEY: [{"group": "a"}]});
        assert!(equal_ignoring_gvk(&a, &json!({"type": "object"})));
        assert!(!equal_ignoring_gvk(
            &a,
            &json!({"type": "object", "x-other": 1})
        ));
    }
}
