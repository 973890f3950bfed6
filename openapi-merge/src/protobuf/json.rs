//! [`encode_json`]: the protobuf form of a JSON document without parsing it whole. The top-level
//! fields and every entry of the large maps (`paths`, `definitions`, …) are parsed one at a time,
//! so the peak is one entry's tree, not the document's (several times its text).

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

use super::schema::Kind::{Custom, Named};
use super::schema::DOCUMENT;
use super::{bytes_field, field, nested, shapes, vendor_extension};

/// Encodes an OpenAPI v2 JSON document as a gnostic `openapi.v2.Document`: the same bytes as
/// [`super::encode_document`] of the parsed document.
pub fn encode_json(json: &[u8]) -> Result<Vec<u8>, serde_json::Error> {
    let top: Entries<'_> = serde_json::from_slice(json)?;
    let mut out = Vec::with_capacity(json.len());
    for (key, raw) in &top.0 {
        let Some((number, kind)) = DOCUMENT.field(key) else {
            if key.starts_with("x-") {
                vendor_extension(DOCUMENT.vendor, key, &parse(raw)?, &mut out);
            }
            continue;
        };
        match (kind, entries(raw)) {
            (Custom(_), Ok(paths)) if key == "paths" => nested(number, &mut out, |o| {
                for (path, raw) in &paths.0 {
                    shapes::path_entry(path, &parse(raw)?, o);
                }
                Ok::<(), serde_json::Error>(())
            })?,
            (Named(inner), Ok(named)) => nested(number, &mut out, |o| {
                for (name, raw) in &named.0 {
                    let value = parse(raw)?;
                    nested(1, o, |o| {
                        bytes_field(1, name.as_bytes(), o);
                        field(2, inner, &value, o);
                    });
                }
                Ok::<(), serde_json::Error>(())
            })?,
            _ => field(number, kind, &parse(raw)?, &mut out),
        }
    }
    Ok(out)
}

fn parse(raw: &RawValue) -> Result<Value, serde_json::Error> {
    serde_json::from_str(raw.get())
}

/// The entries of `raw` when it is an object (an error otherwise).
fn entries(raw: &RawValue) -> Result<Entries<'_>, serde_json::Error> {
    serde_json::from_str(raw.get())
}

/// An object's entries in document order, values left as text.
struct Entries<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Entries<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Ordered;
        impl<'de> Visitor<'de> for Ordered {
            type Value = Entries<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries<'de>, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
                while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                    out.push(entry);
                }
                Ok(Entries(out))
            }
        }
        deserializer.deserialize_map(Ordered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protobuf::encode_document;
    use serde_json::json;

    #[test]
    fn same_bytes_as_the_parsed_document() {
        let doc = json!({
            "swagger": "2.0",
            "info": {"title": "t", "version": "1"},
            "paths": {
                "/a": {"get": {"responses": {"200": {"schema": {"$ref": "#/definitions/A"}}}}},
                "x-p": {"k": 1},
                "/b": {"parameters": [{"$ref": "#/parameters/p"}]}
            },
            "definitions": {"A": {"type": "object", "x-k": [1]}, "B": {"type": "string"}},
            "parameters": {"p": {"in": "query", "name": "n", "type": "string"}},
            "responses": {"R": {"description": "d"}},
            "security": [{"k": []}],
            "x-top": true,
            "unknown": 1
        });
        let text = serde_json::to_vec(&doc).unwrap();
        assert_eq!(encode_json(&text).unwrap(), encode_document(&doc));
        assert!(encode_json(b"[1]").is_err());
    }
}
