//! CBOR (KEP-4222) as kube-apiserver writes its answers, for the documents apiagg writes itself:
//! k8s.io/apimachinery's `pkg/runtime/serializer/cbor/cbor.go` and `.../cbor/internal/modes/`.
//!
//! - every document starts with the self-described CBOR tag 55799 (`0xd9d9f7`);
//! - strings and field names are byte strings (`String: StringToByteString`,
//!   `FieldName: FieldNameToByteString`), never text strings;
//! - integers and floats in their shortest form (floats down to float16 when lossless);
//! - definite lengths only; `null` stays `null`;
//! - map keys in the order of the JSON rendering: answers are encoded with the nondeterministic
//!   mode (`SortNone`, struct fields in declaration order, which is the JSON order).
//!
//! The encoding itself is ciborium's; this module only maps the JSON data model onto it.

use std::io::Cursor;

use ciborium::value::Value as Cbor;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Number, Value};

/// The CBOR media type.
pub const CBOR: &str = "application/cbor";

/// The head of tag 55799 that starts every CBOR document Kubernetes writes.
pub const SELF_DESCRIBED_CBOR: [u8; 3] = [0xd9, 0xd9, 0xf7];

/// A JSON value or document that has no CBOR form as Kubernetes writes it, or CBOR bytes that
/// are not one JSON-compatible document. Not retryable: the same input fails again.
#[derive(Debug, thiserror::Error)]
pub enum CborError {
    /// The JSON input is not valid JSON.
    #[error("cannot read the JSON document: {0}")]
    Json(#[from] serde_json::Error),
    /// ciborium refused to write the value.
    #[error("cannot encode CBOR: {0}")]
    Encode(#[from] ciborium::ser::Error<std::io::Error>),
    /// The bytes are not well-formed CBOR.
    #[error("cannot decode CBOR: {0}")]
    Decode(#[from] ciborium::de::Error<std::io::Error>),
    /// Well-formed CBOR that has no JSON form (a non-string key, a non-UTF-8 string, …).
    #[error("CBOR has no JSON form: {0}")]
    NotJson(String),
}

/// Encodes a JSON value as one CBOR document the way kube-apiserver writes answers.
pub fn to_cbor(value: &Value) -> Result<Vec<u8>, CborError> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&SELF_DESCRIBED_CBOR);
    ciborium::into_writer(&Kube(value), &mut out)?;
    Ok(out)
}

/// Transcodes a JSON document (bytes) to CBOR with [`to_cbor`]: the CBOR decodes to the same
/// value as the JSON.
pub fn json_to_cbor(json: &[u8]) -> Result<Vec<u8>, CborError> {
    to_cbor(&serde_json::from_slice(json)?)
}

/// Decodes one CBOR document into JSON, as apimachinery's decoder reads it: tags are ignored
/// (so the self-described prefix is optional), text and byte strings are both strings, map keys
/// must be strings, and nothing may follow the document.
pub fn from_cbor(bytes: &[u8]) -> Result<Value, CborError> {
    let mut reader = Cursor::new(bytes);
    let item: Cbor = ciborium::from_reader(&mut reader)?;
    if usize::try_from(reader.position()).ok() != Some(bytes.len()) {
        return Err(CborError::NotJson(
            "extraneous data after the CBOR data item".into(),
        ));
    }
    to_json(item)
}

/// A JSON value serialised with Kubernetes' choices (byte strings, keys as in JSON).
struct Kube<'a>(&'a Value);

/// A string written as a CBOR byte string.
struct ByteString<'a>(&'a str);

impl Serialize for ByteString<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0.as_bytes())
    }
}

impl Serialize for Kube<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Null => serializer.serialize_unit(),
            Value::Bool(b) => serializer.serialize_bool(*b),
            Value::Number(n) => serialize_number(n, serializer),
            Value::String(s) => ByteString(s).serialize(serializer),
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Kube(item))?;
                }
                seq.end()
            }
            Value::Object(fields) => {
                let mut map = serializer.serialize_map(Some(fields.len()))?;
                for (key, value) in fields {
                    map.serialize_entry(&ByteString(key), &Kube(value))?;
                }
                map.end()
            }
        }
    }
}

/// Integers as CBOR integers, anything else as the shortest lossless float.
fn serialize_number<S: Serializer>(n: &Number, serializer: S) -> Result<S::Ok, S::Error> {
    if let Some(u) = n.as_u64() {
        serializer.serialize_u64(u)
    } else if let Some(i) = n.as_i64() {
        serializer.serialize_i64(i)
    } else if let Some(f) = n.as_f64() {
        serializer.serialize_f64(f)
    } else {
        Err(serde::ser::Error::custom(format!(
            "number {n} has no CBOR form"
        )))
    }
}

/// A decoded CBOR item as JSON.
fn to_json(item: Cbor) -> Result<Value, CborError> {
    Ok(match item {
        Cbor::Null => Value::Null,
        Cbor::Bool(b) => Value::Bool(b),
        Cbor::Integer(i) => {
            let i = i128::from(i);
            if let Ok(u) = u64::try_from(i) {
                Value::from(u)
            } else if let Ok(i) = i64::try_from(i) {
                Value::from(i)
            } else {
                return Err(CborError::NotJson(format!("integer {i} out of range")));
            }
        }
        Cbor::Float(f) => Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| CborError::NotJson(format!("float {f} is not finite")))?,
        Cbor::Text(s) => Value::String(s),
        Cbor::Bytes(b) => {
            Value::String(String::from_utf8(b).map_err(|e| CborError::NotJson(e.to_string()))?)
        }
        Cbor::Tag(_, inner) => to_json(*inner)?,
        Cbor::Array(items) => {
            Value::Array(items.into_iter().map(to_json).collect::<Result<_, _>>()?)
        }
        Cbor::Map(entries) => {
            let mut fields = Map::with_capacity(entries.len());
            for (key, value) in entries {
                let Value::String(key) = to_json(key)? else {
                    return Err(CborError::NotJson("a map key is not a string".into()));
                };
                if fields.insert(key, to_json(value)?).is_some() {
                    return Err(CborError::NotJson("a map key is repeated".into()));
                }
            }
            Value::Object(fields)
        }
        other => return Err(CborError::NotJson(format!("unsupported item {other:?}"))),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn strings_and_keys_are_byte_strings_after_the_tag() {
        let bytes = to_cbor(&json!({"kind": "K", "b": ""})).expect("encodes");
        assert_eq!(
            bytes,
            [
                &SELF_DESCRIBED_CBOR[..],
                &[0xa2, 0x44],
                b"kind",
                &[0x41, b'K', 0x41, b'b', 0x40],
            ]
            .concat(),
            "map(2), keys in JSON order, every string major type 2"
        );
    }

    #[test]
    fn numbers_take_their_shortest_form() {
        let cases: [(Value, &[u8]); 8] = [
            (json!(0), &[0x00]),
            (json!(23), &[0x17]),
            (json!(503), &[0x19, 0x01, 0xf7]),
            (json!(-1), &[0x20]),
            (
                json!(u64::MAX),
                &[0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            ),
            (json!(1.5), &[0xf9, 0x3e, 0x00]),
            (json!(100000.0), &[0xfa, 0x47, 0xc3, 0x50, 0x00]),
            (
                json!(1.1),
                &[0xfb, 0x3f, 0xf1, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a],
            ),
        ];
        for (value, expected) in cases {
            let bytes = to_cbor(&value).expect("encodes");
            assert_eq!(&bytes[3..], expected, "{value}");
        }
        assert_eq!(&to_cbor(&Value::Null).expect("encodes")[3..], [0xf6]);
        assert_eq!(
            &to_cbor(&json!([true])).expect("encodes")[3..],
            [0x81, 0xf5]
        );
    }

    #[test]
    fn round_trips_through_json() {
        let value = json!({"metadata": {"name": "x", "labels": {"a": "ü"}}, "n": -3, "f": 1.5,
            "big": u64::MAX, "list": [true, null, {}], "empty": []});
        let bytes = to_cbor(&value).expect("encodes");
        assert_eq!(from_cbor(&bytes).expect("decodes"), value);
        let json = serde_json::to_vec(&value).expect("JSON");
        assert_eq!(json_to_cbor(&json).expect("transcodes"), bytes);
    }

    #[test]
    fn decoding_refuses_what_json_cannot_hold() {
        let tagged = to_cbor(&json!({"a": 1})).expect("encodes");
        assert!(
            from_cbor(&[tagged.clone(), vec![0x00]].concat()).is_err(),
            "trailing data"
        );
        assert!(from_cbor(&tagged[..tagged.len() - 1]).is_err(), "truncated");
        assert!(from_cbor(&[0xa1, 0x01, 0x01]).is_err(), "integer key");
        assert!(
            from_cbor(&[0x41, 0xff]).is_err(),
            "byte string that is not UTF-8"
        );
        assert!(
            from_cbor(&[0xa2, 0x41, b'a', 0x01, 0x61, b'a', 0x02]).is_err(),
            "repeated key"
        );
        assert!(from_cbor(&[]).is_err());
        assert!(json_to_cbor(b"{").is_err());
        // Text strings and untagged documents are read too.
        assert_eq!(
            from_cbor(&[0xa1, 0x61, b'a', 0x61, b'b']).expect("decodes"),
            json!({"a": "b"})
        );
    }
}
