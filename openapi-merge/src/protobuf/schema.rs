//! The gnostic `openapi.v2` messages: each lists its JSON keys with field numbers and kinds;
//! the few messages with oneofs or special shapes have hand-written encoders.

use serde_json::Value;

use super::shapes::*;

/// How a JSON value maps to a protobuf field.
pub(super) enum Kind {
    Str,
    Bool,
    Double,
    Int64,
    /// `repeated string`.
    Strings,
    /// gnostic `Any`.
    Any,
    /// `repeated Any` from a JSON array.
    Anys,
    /// A nested message.
    Msg(&'static Desc),
    /// A map written as a wrapper message whose field 1 repeats `Named…{name = 1, value = 2}`.
    Named(&'static Kind),
    /// Hand-written encoder of a message body (oneofs and other special shapes).
    Custom(fn(&Value, &mut Vec<u8>)),
    /// Hand-written encoder of a repeated field: writes every item as field `number`.
    Repeated(fn(u32, &Value, &mut Vec<u8>)),
}

/// A message: its fields and the number of its `vendor_extension` field, if any.
pub(super) struct Desc {
    pub(super) fields: &'static [(&'static str, u32, Kind)],
    pub(super) vendor: Option<u32>,
}

use Kind::*;

pub(super) const fn desc(fields: &'static [(&'static str, u32, Kind)], vendor: u32) -> Desc {
    Desc {
        fields,
        vendor: Some(vendor),
    }
}

pub(super) static EXTERNAL_DOCS: Desc = desc(&[("description", 1, Str), ("url", 2, Str)], 3);
pub(super) static CONTACT: Desc = desc(&[("name", 1, Str), ("url", 2, Str), ("email", 3, Str)], 4);
pub(super) static LICENSE: Desc = desc(&[("name", 1, Str), ("url", 2, Str)], 3);
pub(super) static INFO: Desc = desc(
    &[
        ("title", 1, Str),
        ("version", 2, Str),
        ("description", 3, Str),
        ("termsOfService", 4, Str),
        ("contact", 5, Msg(&CONTACT)),
        ("license", 6, Msg(&LICENSE)),
    ],
    7,
);
pub(super) static XML: Desc = desc(
    &[
        ("name", 1, Str),
        ("namespace", 2, Str),
        ("prefix", 3, Str),
        ("attribute", 4, Bool),
        ("wrapped", 5, Bool),
    ],
    6,
);
pub(super) static SCHEMA_KIND: Kind = Msg(&SCHEMA);
pub(super) static SCHEMA: Desc = desc(
    &[
        ("$ref", 1, Str),
        ("format", 2, Str),
        ("title", 3, Str),
        ("description", 4, Str),
        ("default", 5, Any),
        ("multipleOf", 6, Double),
        ("maximum", 7, Double),
        ("exclusiveMaximum", 8, Bool),
        ("minimum", 9, Double),
        ("exclusiveMinimum", 10, Bool),
        ("maxLength", 11, Int64),
        ("minLength", 12, Int64),
        ("pattern", 13, Str),
        ("maxItems", 14, Int64),
        ("minItems", 15, Int64),
        ("uniqueItems", 16, Bool),
        ("maxProperties", 17, Int64),
        ("minProperties", 18, Int64),
        ("required", 19, Strings),
        ("enum", 20, Anys),
        ("additionalProperties", 21, Custom(additional_properties)),
        ("type", 22, Custom(type_item)),
        ("items", 23, Custom(items_item)),
        ("allOf", 24, Repeated(all_of)),
        ("properties", 25, Named(&SCHEMA_KIND)),
        ("discriminator", 26, Str),
        ("readOnly", 27, Bool),
        ("xml", 28, Msg(&XML)),
        ("externalDocs", 29, Msg(&EXTERNAL_DOCS)),
        ("example", 30, Any),
    ],
    31,
);
pub(super) static FILE_SCHEMA: Desc = desc(
    &[
        ("format", 1, Str),
        ("title", 2, Str),
        ("description", 3, Str),
        ("default", 4, Any),
        ("required", 5, Strings),
        ("type", 6, Str),
        ("readOnly", 7, Bool),
        ("externalDocs", 8, Msg(&EXTERNAL_DOCS)),
        ("example", 9, Any),
    ],
    10,
);
/// `PrimitivesItems` and `Header` share this layout up to `multipleOf`.
pub(super) static PRIMITIVES_ITEMS: Desc = desc(
    &[
        ("type", 1, Str),
        ("format", 2, Str),
        ("items", 3, Msg(&PRIMITIVES_ITEMS)),
        ("collectionFormat", 4, Str),
        ("default", 5, Any),
        ("maximum", 6, Double),
        ("exclusiveMaximum", 7, Bool),
        ("minimum", 8, Double),
        ("exclusiveMinimum", 9, Bool),
        ("maxLength", 10, Int64),
        ("minLength", 11, Int64),
        ("pattern", 12, Str),
        ("maxItems", 13, Int64),
        ("minItems", 14, Int64),
        ("uniqueItems", 15, Bool),
        ("enum", 16, Anys),
        ("multipleOf", 17, Double),
    ],
    18,
);
pub(super) static HEADER_KIND: Kind = Msg(&HEADER);
pub(super) static HEADER: Desc = desc(
    &[
        ("type", 1, Str),
        ("format", 2, Str),
        ("items", 3, Msg(&PRIMITIVES_ITEMS)),
        ("collectionFormat", 4, Str),
        ("default", 5, Any),
        ("maximum", 6, Double),
        ("exclusiveMaximum", 7, Bool),
        ("minimum", 8, Double),
        ("exclusiveMinimum", 9, Bool),
        ("maxLength", 10, Int64),
        ("minLength", 11, Int64),
        ("pattern", 12, Str),
        ("maxItems", 13, Int64),
        ("minItems", 14, Int64),
        ("uniqueItems", 15, Bool),
        ("enum", 16, Anys),
        ("multipleOf", 17, Double),
        ("description", 18, Str),
    ],
    19,
);
pub(super) static BODY_PARAMETER: Desc = desc(
    &[
        ("description", 1, Str),
        ("name", 2, Str),
        ("in", 3, Str),
        ("required", 4, Bool),
        ("schema", 5, Msg(&SCHEMA)),
    ],
    6,
);
/// Header and path parameters (same numbering).
pub(super) static HEADER_OR_PATH_PARAMETER: Desc = desc(
    &[
        ("required", 1, Bool),
        ("in", 2, Str),
        ("description", 3, Str),
        ("name", 4, Str),
        ("type", 5, Str),
        ("format", 6, Str),
        ("items", 7, Msg(&PRIMITIVES_ITEMS)),
        ("collectionFormat", 8, Str),
        ("default", 9, Any),
        ("maximum", 10, Double),
        ("exclusiveMaximum", 11, Bool),
        ("minimum", 12, Double),
        ("exclusiveMinimum", 13, Bool),
        ("maxLength", 14, Int64),
        ("minLength", 15, Int64),
        ("pattern", 16, Str),
        ("maxItems", 17, Int64),
        ("minItems", 18, Int64),
        ("uniqueItems", 19, Bool),
        ("enum", 20, Anys),
        ("multipleOf", 21, Double),
    ],
    22,
);
/// Query and formData parameters (same numbering, with `allowEmptyValue`).
pub(super) static QUERY_OR_FORM_PARAMETER: Desc = desc(
    &[
        ("required", 1, Bool),
        ("in", 2, Str),
        ("description", 3, Str),
        ("name", 4, Str),
        ("allowEmptyValue", 5, Bool),
        ("type", 6, Str),
        ("format", 7, Str),
        ("items", 8, Msg(&PRIMITIVES_ITEMS)),
        ("collectionFormat", 9, Str),
        ("default", 10, Any),
        ("maximum", 11, Double),
        ("exclusiveMaximum", 12, Bool),
        ("minimum", 13, Double),
        ("exclusiveMinimum", 14, Bool),
        ("maxLength", 15, Int64),
        ("minLength", 16, Int64),
        ("pattern", 17, Str),
        ("maxItems", 18, Int64),
        ("minItems", 19, Int64),
        ("uniqueItems", 20, Bool),
        ("enum", 21, Anys),
        ("multipleOf", 22, Double),
    ],
    23,
);
pub(super) static RESPONSE_KIND: Kind = Custom(response_message);
pub(super) static RESPONSE: Desc = desc(
    &[
        ("description", 1, Str),
        ("schema", 2, Custom(schema_item)),
        ("headers", 3, Named(&HEADER_KIND)),
        ("examples", 4, Custom(examples)),
    ],
    5,
);
pub(super) static OPERATION: Desc = desc(
    &[
        ("tags", 1, Strings),
        ("summary", 2, Str),
        ("description", 3, Str),
        ("externalDocs", 4, Msg(&EXTERNAL_DOCS)),
        ("operationId", 5, Str),
        ("produces", 6, Strings),
        ("consumes", 7, Strings),
        ("parameters", 8, Repeated(parameters_items)),
        ("responses", 9, Custom(responses)),
        ("schemes", 10, Strings),
        ("deprecated", 11, Bool),
        ("security", 12, Repeated(security_requirements)),
    ],
    13,
);
pub(super) static PATH_ITEM: Desc = desc(
    &[
        ("$ref", 1, Str),
        ("get", 2, Msg(&OPERATION)),
        ("put", 3, Msg(&OPERATION)),
        ("post", 4, Msg(&OPERATION)),
        ("delete", 5, Msg(&OPERATION)),
        ("options", 6, Msg(&OPERATION)),
        ("head", 7, Msg(&OPERATION)),
        ("patch", 8, Msg(&OPERATION)),
        ("parameters", 9, Repeated(parameters_items)),
    ],
    10,
);
pub(super) static PARAMETER_KIND: Kind = Custom(parameter);
pub(super) static TAG: Desc = desc(
    &[
        ("name", 1, Str),
        ("description", 2, Str),
        ("externalDocs", 3, Msg(&EXTERNAL_DOCS)),
    ],
    4,
);
pub(super) static DOCUMENT: Desc = desc(
    &[
        ("swagger", 1, Str),
        ("info", 2, Msg(&INFO)),
        ("host", 3, Str),
        ("basePath", 4, Str),
        ("schemes", 5, Strings),
        ("consumes", 6, Strings),
        ("produces", 7, Strings),
        ("paths", 8, Custom(paths)),
        ("definitions", 9, Named(&SCHEMA_KIND)),
        ("parameters", 10, Named(&PARAMETER_KIND)),
        ("responses", 11, Named(&RESPONSE_KIND)),
        ("security", 12, Repeated(security_requirements)),
        ("securityDefinitions", 13, Custom(security_definitions)),
        ("tags", 14, Repeated(tags)),
        ("externalDocs", 15, Msg(&EXTERNAL_DOCS)),
    ],
    16,
);
