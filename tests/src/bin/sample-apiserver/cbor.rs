//! CBOR (KEP-4222) as kube-apiserver 1.32+ speaks it with the `CBORServingAndStorage` feature:
//! `application/cbor` documents prefixed with the self-described CBOR tag 55799, watches as
//! `application/cbor-seq` (one encoded `{type, object}` event after another), and the
//! negotiation of both against `Accept`.
//!
//! The encoding follows apimachinery's CBOR mode: strings and field names as byte strings, map
//! keys sorted bytewise lexically by their encoding, floats in their shortest lossless width,
//! definite lengths only. Decoding accepts text or byte strings and ignores tags.

use std::io::Cursor;

use ciborium::value::Value as Cbor;
use serde_json::{Map, Number, Value};

pub const CBOR: &str = "application/cbor";
pub const CBOR_SEQ: &str = "application/cbor-seq";

/// The self-described CBOR tag (55799) Kubernetes writes before every CBOR document.
pub const SELF_DESCRIBED: [u8; 3] = [0xd9, 0xd9, 0xf7];

/// The media type of an answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Json,
    Cbor,
}

/// The format `Accept` asks for: the first acceptable media range wins (`q=0` ranges are not
/// acceptable). `None` when the client asks for CBOR only and `cbor` is off (a 406); a header
/// naming only media types this sample does not write (YAML, protobuf) still gets JSON, as it
/// always did.
pub fn negotiate(accept: Option<&str>, cbor: bool) -> Option<Format> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Some(Format::Json);
    };
    let mut asked_cbor = false;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let refused = parts.any(|p| {
            p.split_once('=').is_some_and(|(k, v)| {
                k.trim().eq_ignore_ascii_case("q") && v.trim().parse::<f32>().ok() == Some(0.0)
            })
        });
        if refused {
            continue;
        }
        match media.as_str() {
            CBOR if cbor => return Some(Format::Cbor),
            CBOR => asked_cbor = true,
            "application/json" | "application/*" | "*/*" => return Some(Format::Json),
            _ => {}
        }
    }
    (!asked_cbor).then_some(Format::Json)
}

/// Whether a `Content-Type` is `application/cbor` (parameters ignored).
pub fn is_cbor(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|ct| ct.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case(CBOR))
}

/// One CBOR document: the self-described tag, then `value`.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = SELF_DESCRIBED.to_vec();
    // Writing to a Vec fails only on values CBOR cannot hold, and JSON values have none.
    let _ = ciborium::into_writer(&to_cbor(value), &mut out);
    out
}

fn to_cbor(value: &Value) -> Cbor {
    match value {
        Value::Null => Cbor::Null,
        Value::Bool(b) => Cbor::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Cbor::Integer(u.into()),
            (_, Some(i), _) => Cbor::Integer(i.into()),
            (_, _, f) => Cbor::Float(f.unwrap_or_default()),
        },
        Value::String(s) => Cbor::Bytes(s.as_bytes().to_vec()),
        Value::Array(items) => Cbor::Array(items.iter().map(to_cbor).collect()),
        Value::Object(fields) => {
            let mut entries: Vec<(Vec<u8>, Cbor, Cbor)> = fields
                .iter()
                .map(|(k, v)| {
                    let key = Cbor::Bytes(k.as_bytes().to_vec());
                    let mut encoded = Vec::new();
                    let _ = ciborium::into_writer(&key, &mut encoded);
                    (encoded, key, to_cbor(v))
                })
                .collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Cbor::Map(entries.into_iter().map(|(_, k, v)| (k, v)).collect())
        }
    }
}

/// A request body: exactly one CBOR data item (tags allowed, nothing after it).
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    let mut reader = Cursor::new(bytes);
    let item: Cbor = ciborium::from_reader(&mut reader).map_err(|e| e.to_string())?;
    if reader.position() != bytes.len() as u64 {
        return Err("extraneous data after the CBOR data item".into());
    }
    to_json(item)
}

fn to_json(item: Cbor) -> Result<Value, String> {
    Ok(match item {
        Cbor::Null => Value::Null,
        Cbor::Bool(b) => Value::Bool(b),
        Cbor::Integer(i) => {
            let i = i128::from(i);
            match (u64::try_from(i), i64::try_from(i)) {
                (Ok(u), _) => Value::from(u),
                (_, Ok(i)) => Value::from(i),
                _ => return Err(format!("integer {i} out of range")),
            }
        }
        Cbor::Float(f) => Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| format!("float {f} is not finite"))?,
        Cbor::Text(s) => Value::String(s),
        Cbor::Bytes(b) => Value::String(String::from_utf8(b).map_err(|e| e.to_string())?),
        Cbor::Tag(_, inner) => to_json(*inner)?,
        Cbor::Array(items) => {
            Value::Array(items.into_iter().map(to_json).collect::<Result<_, _>>()?)
        }
        Cbor::Map(entries) => {
            let mut fields = Map::new();
            for (k, v) in entries {
                let Value::String(key) = to_json(k)? else {
                    return Err("map keys must be strings".into());
                };
                fields.insert(key, to_json(v)?);
            }
            Value::Object(fields)
        }
        other => return Err(format!("unsupported CBOR item {other:?}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn negotiation_takes_the_first_acceptable_range() {
        assert_eq!(negotiate(None, true), Some(Format::Json));
        assert_eq!(negotiate(Some(CBOR), true), Some(Format::Cbor));
        assert_eq!(negotiate(Some(CBOR), false), None);
        let both = "application/cbor, application/json";
        assert_eq!(negotiate(Some(both), true), Some(Format::Cbor));
        assert_eq!(negotiate(Some(both), false), Some(Format::Json));
        let json_first = "application/json;q=0.9, application/cbor";
        assert_eq!(negotiate(Some(json_first), true), Some(Format::Json));
        let refused = "application/cbor;q=0, application/json";
        assert_eq!(negotiate(Some(refused), true), Some(Format::Json));
        assert_eq!(
            negotiate(Some("application/yaml"), false),
            Some(Format::Json)
        );
    }

    #[test]
    fn round_trip_with_the_self_described_tag() {
        let value = json!({"metadata": {"name": "x", "labels": {"a": "ü"}}, "n": -3, "f": 1.5,
            "big": u64::MAX, "list": [true, null]});
        let bytes = encode(&value);
        assert_eq!(bytes[..3], SELF_DESCRIBED);
        assert_eq!(decode(&bytes), Ok(value));
        assert!(decode(&[bytes.clone(), vec![0]].concat()).is_err());
    }

    #[test]
    fn keys_sort_by_their_encoding_and_strings_are_byte_strings() {
        let bytes = encode(&json!({"kind": "K", "b": "v", "apiVersion": "v1"}));
        // map(3), then "b" (1 byte) before "kind" (4) before "apiVersion" (10).
        assert_eq!(bytes[3], 0xa3);
        assert_eq!(bytes[4..6], [0x41, b'b']);
        assert_eq!(bytes[6..8], [0x41, b'v']);
        assert_eq!(bytes[8], 0x44);
    }
}
