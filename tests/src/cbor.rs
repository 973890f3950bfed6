//! CBOR as the tests read and write it, independently of apiagg's encoder: Kubernetes' form
//! (the self-described tag 55799 first, strings as byte strings) decoded to JSON with ciborium.

use std::io::Cursor;

use serde_json::{json, Value};

/// The self-described CBOR tag 55799 that Kubernetes writes first.
pub const SELF_DESCRIBED: [u8; 3] = [0xd9, 0xd9, 0xf7];

/// A client's CBOR body: the self-described tag, then `value` (text strings, serde order, unlike
/// the backend's own encoding, so that a re-encoding anywhere would show).
pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = SELF_DESCRIBED.to_vec();
    ciborium::into_writer(value, &mut out).expect("encode CBOR");
    out
}

/// One CBOR data item as JSON (tags dropped, byte strings read as UTF-8).
pub fn to_json(item: ciborium::Value) -> Value {
    use ciborium::Value as C;
    match item {
        C::Null => Value::Null,
        C::Bool(b) => Value::Bool(b),
        C::Integer(i) => {
            let i = i128::from(i);
            match u64::try_from(i) {
                Ok(u) => json!(u),
                Err(_) => json!(i64::try_from(i).expect("integer in range")),
            }
        }
        C::Float(f) => json!(f),
        C::Text(s) => Value::String(s),
        C::Bytes(b) => Value::String(String::from_utf8(b).expect("UTF-8 byte string")),
        C::Tag(_, inner) => to_json(*inner),
        C::Array(items) => Value::Array(items.into_iter().map(to_json).collect()),
        C::Map(entries) => Value::Object(
            entries
                .into_iter()
                .map(|(k, v)| match to_json(k) {
                    Value::String(k) => (k, to_json(v)),
                    other => panic!("map key {other} is not a string"),
                })
                .collect(),
        ),
        other => panic!("unexpected CBOR item {other:?}"),
    }
}

/// A whole CBOR document: the self-described tag, one data item, nothing after it.
pub fn decode(bytes: &[u8]) -> Value {
    assert_eq!(bytes.get(..3), Some(&SELF_DESCRIBED[..]), "{bytes:02x?}");
    let items = decode_seq(bytes);
    assert_eq!(items.len(), 1, "one data item: {bytes:02x?}");
    items.into_iter().next().expect("one item")
}

/// The complete data items at the start of a CBOR sequence (a partial last item is left out);
/// each must start with the self-described tag.
pub fn decode_seq(bytes: &[u8]) -> Vec<Value> {
    let mut reader = Cursor::new(bytes);
    let mut items = Vec::new();
    while (reader.position() as usize) < bytes.len() {
        let start = reader.position() as usize;
        match ciborium::from_reader::<ciborium::Value, _>(&mut reader) {
            Ok(item) => {
                assert_eq!(
                    bytes.get(start..start + 3),
                    Some(&SELF_DESCRIBED[..]),
                    "item at {start} of {bytes:02x?}"
                );
                items.push(to_json(item));
            }
            Err(ciborium::de::Error::Io(_)) => break,
            Err(e) => panic!("invalid CBOR at {start} ({e}): {bytes:02x?}"),
        }
    }
    items
}
