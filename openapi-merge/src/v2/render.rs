//! Serialises a [`Merger`] straight to JSON bytes: entries no rename touches are copied as the
//! compact text their source keeps; the others are parsed one at a time and written with their
//! `$ref`s renamed on the fly.

use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
use serde_json::Value;

use super::merge::{Merger, OutDefinition, GVK_KEY};
use super::refs::Renames;
use super::source::{Entry, Top};

/// Renders the merged document. Top-level keys keep the base document's order; `paths`,
/// `definitions` and `parameters` are sorted by key (as Go's encoder writes them upstream).
pub(crate) fn render(merger: &Merger<'_>) -> Result<Vec<u8>, serde_json::Error> {
    // Reserve about what is written, so the buffer is not regrown (and copied) on the way:
    // untouched capacity costs no memory.
    let entries = merger
        .paths
        .values()
        .map(|(_, e)| e)
        .chain(merger.definitions.values().map(|d| &d.entry))
        .chain(merger.parameters.values().map(|(_, e)| e))
        .map(|e| e.name.len() + e.json.get().len() + 8)
        .sum::<usize>();
    let mut out = Vec::with_capacity(entries + entries / 16 + 64 * 1024);
    serde_json::to_writer(&mut out, &Document(merger))?;
    Ok(out)
}

struct Document<'m, 'a>(&'m Merger<'a>);

impl Serialize for Document<'_, '_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let m = self.0;
        let mut paths: Vec<_> = m.paths.iter().collect();
        paths.sort_unstable_by_key(|(k, _)| **k);
        let mut definitions: Vec<_> = m.definitions.iter().collect();
        definitions.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut parameters: Vec<_> = m.parameters.iter().collect();
        parameters.sort_unstable_by(|a, b| a.0.cmp(b.0));

        let mut map = ser.serialize_map(None)?;
        let (mut wrote_paths, mut wrote_definitions, mut wrote_parameters) = (false, false, false);
        for (key, top) in m.base.into_iter().flat_map(|b| &b.root) {
            match (key.as_ref(), top) {
                (_, Top::Other(value)) => map.serialize_entry(key.as_ref(), value)?,
                ("paths", Top::Section) => {
                    map.serialize_entry(key.as_ref(), &Paths(&paths, m))?;
                    wrote_paths = true;
                }
                ("definitions", Top::Section) => {
                    if !definitions.is_empty() {
                        map.serialize_entry(key.as_ref(), &Definitions(&definitions, m))?;
                    }
                    wrote_definitions = true;
                }
                ("parameters", Top::Section) => {
                    if !parameters.is_empty() {
                        map.serialize_entry(key.as_ref(), &Parameters(&parameters, m))?;
                    }
                    wrote_parameters = true;
                }
                (_, Top::Section) => {}
            }
        }
        if !wrote_paths {
            map.serialize_entry("paths", &Paths(&paths, m))?;
        }
        if !wrote_definitions && !definitions.is_empty() {
            map.serialize_entry("definitions", &Definitions(&definitions, m))?;
        }
        if !wrote_parameters && !parameters.is_empty() {
            map.serialize_entry("parameters", &Parameters(&parameters, m))?;
        }
        map.end()
    }
}

fn renames_of<'m>(m: &'m Merger<'_>, source: usize) -> Option<&'m Renames> {
    m.renames.get(source).filter(|r| !r.is_empty())
}

type PathList<'m, 'a> = [(&'m &'a str, &'m (usize, &'a Entry))];
struct Paths<'m, 'a>(&'m PathList<'m, 'a>, &'m Merger<'a>);

impl Serialize for Paths<'_, '_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(Some(self.0.len()))?;
        for (path, (source, item)) in self.0 {
            map.serialize_entry(**path, &Written(item, renames_of(self.1, *source)))?;
        }
        map.end()
    }
}

type DefinitionList<'m, 'a> = [(&'m std::borrow::Cow<'a, str>, &'m OutDefinition<'a>)];
struct Definitions<'m, 'a>(&'m DefinitionList<'m, 'a>, &'m Merger<'a>);

impl Serialize for Definitions<'_, '_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(Some(self.0.len()))?;
        for (name, def) in self.0 {
            let renames = renames_of(self.1, def.source);
            let Some(gvk) = &def.gvk else {
                map.serialize_entry(name.as_ref(), &Written(def.entry, renames))?;
                continue;
            };
            match def.entry.value() {
                Value::Object(fields) => {
                    let with_gvk = WithGvk {
                        fields: &fields,
                        gvk,
                        renames,
                    };
                    map.serialize_entry(name.as_ref(), &with_gvk)?;
                }
                value => map.serialize_entry(name.as_ref(), &Rewrite::new(&value, renames))?,
            }
        }
        map.end()
    }
}

type ParameterList<'m, 'a> = [(&'m std::borrow::Cow<'a, str>, &'m (usize, &'a Entry))];
struct Parameters<'m, 'a>(&'m ParameterList<'m, 'a>, &'m Merger<'a>);

impl Serialize for Parameters<'_, '_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(Some(self.0.len()))?;
        for (name, (source, value)) in self.0 {
            map.serialize_entry(name.as_ref(), &Written(value, renames_of(self.1, *source)))?;
        }
        map.end()
    }
}

/// An entry copied as its compact text, or parsed and rewritten when its source has renames.
struct Written<'m>(&'m Entry, Option<&'m Renames>);

impl Serialize for Written<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        match self.1 {
            None => self.0.json.serialize(ser),
            Some(renames) => Rewrite::new(&self.0.value(), Some(renames)).serialize(ser),
        }
    }
}

/// A definition whose `x-kubernetes-group-version-kind` was replaced by the merged list (placed
/// where the original was, or appended).
struct WithGvk<'m> {
    fields: &'m serde_json::Map<String, Value>,
    gvk: &'m Value,
    renames: Option<&'m Renames>,
}

impl Serialize for WithGvk<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(None)?;
        for (key, value) in self.fields {
            if key == GVK_KEY {
                map.serialize_entry(key, self.gvk)?;
            } else {
                map.serialize_entry(key, &Rewrite::new(value, self.renames))?;
            }
        }
        if !self.fields.contains_key(GVK_KEY) {
            map.serialize_entry(GVK_KEY, self.gvk)?;
        }
        map.end()
    }
}

/// A value written as is, or with `"$ref"` strings mapped through a source's renames.
struct Rewrite<'m> {
    value: &'m Value,
    renames: Option<&'m Renames>,
}

impl<'m> Rewrite<'m> {
    fn new(value: &'m Value, renames: Option<&'m Renames>) -> Self {
        Self { value, renames }
    }
}

impl Serialize for Rewrite<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let Some(renames) = self.renames else {
            return self.value.serialize(ser);
        };
        match self.value {
            Value::Object(fields) => {
                let mut map = ser.serialize_map(Some(fields.len()))?;
                for (key, value) in fields {
                    if let (true, Value::String(target)) = (key == "$ref", value) {
                        let target = renames.get(target).unwrap_or(target);
                        map.serialize_entry(key, target)?;
                    } else {
                        map.serialize_entry(key, &Rewrite::new(value, self.renames))?;
                    }
                }
                map.end()
            }
            Value::Array(items) => {
                let mut seq = ser.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Rewrite::new(item, self.renames))?;
                }
                seq.end()
            }
            scalar => scalar.serialize(ser),
        }
    }
}
