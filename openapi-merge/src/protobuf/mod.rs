//! OpenAPI v2 as gnostic protobuf (`openapi.v2.Document`, media type
//! `application/com.github.proto-openapi.spec.v2.v1.0+protobuf`), encoded from the merged JSON.
//! kubectl up to 1.27 reads `/openapi/v2` only in this form (`kubectl explain`, `apply`).
//!
//! The encoder is table driven: each message lists its JSON keys with their field numbers and
//! kinds; `x-…` keys go to the message's vendor-extension field. Free-form values (`default`,
//! `example`, `enum` items, extensions) are gnostic `Any` messages whose `yaml` field holds the
//! value as JSON text (JSON is YAML). Unknown keys are skipped.

mod json;
mod schema;
mod shapes;

pub(crate) use self::json::encode_json;

use serde_json::{Map, Value};

use self::schema::Kind::*;
use self::schema::{Desc, Kind, DOCUMENT};

/// Encodes an OpenAPI v2 JSON document as a gnostic `openapi.v2.Document`.
pub fn encode_document(doc: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 << 20);
    if let Value::Object(map) = doc {
        message_body(map, &DOCUMENT, &mut out);
    }
    out
}

fn varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn tag(number: u32, wire: u8, out: &mut Vec<u8>) {
    varint((u64::from(number) << 3) | u64::from(wire), out);
}

fn bytes_field(number: u32, bytes: &[u8], out: &mut Vec<u8>) {
    tag(number, 2, out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// Writes `number` as a length-delimited field whose body `body` writes. The body goes straight
/// into `out` and its length is inserted before it afterwards (no buffer per message).
fn nested<T>(number: u32, out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>) -> T) -> T {
    tag(number, 2, out);
    let start = out.len();
    let result = body(out);
    let mut length = Vec::with_capacity(10);
    varint((out.len() - start) as u64, &mut length);
    out.splice(start..start, length);
    result
}

fn string_field(number: u32, value: &Value, out: &mut Vec<u8>) {
    if let Some(s) = value.as_str() {
        bytes_field(number, s.as_bytes(), out);
    }
}

fn any_field(number: u32, value: &Value, out: &mut Vec<u8>) {
    let text = value.to_string();
    nested(number, out, |o| bytes_field(2, text.as_bytes(), o));
}

fn vendor_extension(number: u32, name: &str, value: &Value, out: &mut Vec<u8>) {
    nested(number, out, |o| {
        bytes_field(1, name.as_bytes(), o);
        any_field(2, value, o);
    });
}

fn message_body(map: &Map<String, Value>, desc: &Desc, out: &mut Vec<u8>) {
    for (key, value) in map {
        if let Some((number, kind)) = desc.field(key) {
            field(number, kind, value, out);
        } else if key.starts_with("x-") {
            vendor_extension(desc.vendor, key, value, out);
        }
    }
}

fn field(number: u32, kind: &Kind, value: &Value, out: &mut Vec<u8>) {
    match kind {
        Str => string_field(number, value, out),
        Bool => {
            if let Some(b) = value.as_bool() {
                tag(number, 0, out);
                out.push(u8::from(b));
            }
        }
        Double => {
            if let Some(f) = value.as_f64() {
                tag(number, 1, out);
                out.extend_from_slice(&f.to_le_bytes());
            }
        }
        Int64 => {
            if let Some(i) = value.as_i64() {
                tag(number, 0, out);
                varint(i as u64, out);
            }
        }
        Strings => {
            for s in value.as_array().into_iter().flatten() {
                string_field(number, s, out);
            }
        }
        Any => any_field(number, value, out),
        Anys => {
            for item in value.as_array().into_iter().flatten() {
                any_field(number, item, out);
            }
        }
        Msg(desc) => {
            if let Value::Object(map) = value {
                nested(number, out, |o| message_body(map, desc, o));
            }
        }
        Named(inner) => {
            if let Value::Object(map) = value {
                nested(number, out, |o| named_entries(map, inner, 1, o));
            }
        }
        Custom(encode) => nested(number, out, |o| encode(value, o)),
        Repeated(encode) => encode(number, value, out),
    }
}

/// `Named…{name = 1, value = 2}` entries of a map, at field `number`.
fn named_entries(map: &Map<String, Value>, kind: &Kind, number: u32, out: &mut Vec<u8>) {
    for (name, value) in map {
        nested(number, out, |o| {
            bytes_field(1, name.as_bytes(), o);
            field(2, kind, value, o);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encodes_known_bytes() {
        // swagger = "2.0" (field 1), info.title = "t" (field 2 → field 1).
        let doc = json!({"swagger": "2.0", "info": {"title": "t"}});
        assert_eq!(
            encode_document(&doc),
            vec![0x0a, 3, b'2', b'.', b'0', 0x12, 3, 0x0a, 1, b't']
        );
    }

    #[test]
    fn definitions_are_named_schemas_with_extensions_as_yaml() {
        let doc = json!({"definitions": {"A": {"type": "object", "x-k": [1]}}});
        let bytes = encode_document(&doc);
        // definitions (9) { additional_properties (1) { name "A", value (2) { type (22) {
        //   value "object" }, vendor_extension (31) { name "x-k", value { yaml "[1]" } } } } }
        let schema = [
            &[0xb2, 0x01, 8, 0x0a, 6][..],
            b"object",
            &[0xfa, 0x01, 12, 0x0a, 3],
            b"x-k",
            &[0x12, 5, 0x12, 3],
            b"[1]",
        ]
        .concat();
        let named = [&[0x0a, 1, b'A', 0x12, schema.len() as u8][..], &schema].concat();
        let definitions = [&[0x0a, named.len() as u8][..], &named].concat();
        let expected = [&[0x4a, definitions.len() as u8][..], &definitions].concat();
        assert_eq!(bytes, expected);
    }

    #[test]
    fn parameters_and_headers_renumber_the_primitive_fields() {
        // Parameter { non_body_parameter (2) { <sub-schema> { in (2), name (4), type, maxLength } } }
        let encoded = |param: Value| {
            let mut out = Vec::new();
            shapes::parameter(&param, &mut out);
            out
        };
        let non_body = |sub: u8, type_tag: u8, max_length_tag: u8, location: &[u8]| {
            let inner = [
                &[0x12, location.len() as u8][..],
                location,
                &[0x22, 1, b'n', type_tag, 1, b's', max_length_tag, 3],
            ]
            .concat();
            let sub = [&[(sub << 3) | 2, inner.len() as u8][..], &inner].concat();
            [&[0x12, sub.len() as u8][..], &sub].concat()
        };
        let param =
            |location: &str| json!({"in": location, "name": "n", "type": "s", "maxLength": 3});
        // header (1) and path (4): type = 5, maxLength = 14.
        assert_eq!(encoded(param("header")), non_body(1, 0x2a, 0x70, b"header"));
        assert_eq!(encoded(param("path")), non_body(4, 0x2a, 0x70, b"path"));
        // formData (2) and query (3): type = 6, maxLength = 15.
        assert_eq!(
            encoded(param("formData")),
            non_body(2, 0x32, 0x78, b"formData")
        );
        assert_eq!(encoded(param("query")), non_body(3, 0x32, 0x78, b"query"));

        // Response headers: Header { type = 1, description = 18 }, extensions at 19.
        let doc = json!({"responses": {"R": {"headers": {"H": {"type": "s", "description": "d", "x-e": 1}}}}});
        let header = [
            &[0x0a, 1, b's', 0x92, 0x01, 1, b'd', 0x9a, 0x01, 10, 0x0a, 3][..],
            b"x-e",
            &[0x12, 3, 0x12, 1, b'1'],
        ]
        .concat();
        let named_header = [&[0x0a, 1, b'H', 0x12, header.len() as u8][..], &header].concat();
        let headers = [&[0x0a, named_header.len() as u8][..], &named_header].concat();
        let response = [&[0x1a, headers.len() as u8][..], &headers].concat();
        let named_response = [&[0x0a, 1, b'R', 0x12, response.len() as u8][..], &response].concat();
        let responses = [&[0x0a, named_response.len() as u8][..], &named_response].concat();
        let expected = [&[0x5a, responses.len() as u8][..], &responses].concat();
        assert_eq!(encode_document(&doc), expected);
    }

    #[test]
    fn repeated_custom_fields_get_their_number() {
        let doc = json!({"tags": [{"name": "a"}, {"name": "b"}]});
        assert_eq!(
            encode_document(&doc),
            vec![0x72, 3, 0x0a, 1, b'a', 0x72, 3, 0x0a, 1, b'b']
        );
    }
}
