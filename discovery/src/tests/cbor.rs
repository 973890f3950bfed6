//! CBOR: every rendered document decodes to its JSON, and negotiation picks CBOR exactly when
//! kube-apiserver would.

use apiagg_apis::{from_cbor, strong_etag, SELF_DESCRIBED_CBOR};
use ciborium::value::Value as Cbor;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::fixtures::{load, KUBE, OAUTH};
use crate::merge::{GroupVersionEntry, Priority, Source};
use crate::negotiate::*;
use crate::order::{legacy_group_list, ApiServiceRecord};
use crate::render::*;
use crate::types::*;

const CBOR: &str = "application/cbor";
const V2_JSON: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const V2_CBOR: &str = "application/cbor;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
const BETA_JSON: &str = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
const BETA_CBOR: &str = "application/cbor;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList";
const KUBECTL: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

/// Every string and map key of an item is a byte string (upstream's `StringToByteString`).
fn assert_byte_strings(item: &Cbor, at: &str) {
    match item {
        Cbor::Text(t) => panic!("{at}: text string {t:?}"),
        Cbor::Tag(tag, _) => panic!("{at}: tag {tag} inside the document"),
        Cbor::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| assert_byte_strings(v, &format!("{at}[{i}]"))),
        Cbor::Map(entries) => {
            for (key, value) in entries {
                let Cbor::Bytes(name) = key else {
                    panic!("{at}: key {key:?} is not a byte string");
                };
                assert_byte_strings(value, &format!("{at}.{}", String::from_utf8_lossy(name)));
            }
        }
        _ => {}
    }
}

/// The top-level keys of a JSON object, in order.
fn keys(value: &Value) -> Vec<String> {
    value
        .as_object()
        .map_or_else(Vec::new, |m| m.keys().cloned().collect())
}

/// One rendering checked in both formats.
fn check(name: &str, doc: &RenderedDoc, json_type: &str, cbor_type: &str) {
    assert_eq!(doc.body(Format::Json), (&doc.bytes, json_type), "{name}");
    assert_eq!(doc.body(Format::Cbor), (&doc.cbor, cbor_type), "{name}");
    assert!(
        doc.cbor.starts_with(&SELF_DESCRIBED_CBOR),
        "{name}: tag 55799"
    );
    let json: Value = serde_json::from_slice(&doc.bytes).expect("JSON");
    let decoded = from_cbor(&doc.cbor).expect("CBOR decodes");
    assert_eq!(decoded, json, "{name}: CBOR and JSON say the same");
    assert_eq!(
        keys(&decoded),
        keys(&json),
        "{name}: keys in the JSON order"
    );
    // ciborium's own reading: one tag 55799 around a map of byte strings, nothing after it.
    let item: Cbor = ciborium::from_reader(&doc.cbor[..]).expect("ciborium reads it");
    let Cbor::Tag(55799, inner) = item else {
        panic!("{name}: not tagged self-described: {item:?}");
    };
    assert!(matches!(*inner, Cbor::Map(_)), "{name}: a map");
    assert_byte_strings(&inner, name);
    // The exact bytes: ciborium writing the JSON's item, built without `apiagg_apis::to_cbor`.
    let mut expected = SELF_DESCRIBED_CBOR.to_vec();
    ciborium::into_writer(&json_as_cbor(&json), &mut expected).expect("writes");
    assert!(doc.cbor == expected, "{name}: the bytes of the JSON's item");
}

/// The expected item for a JSON value, built independently of `apiagg_apis::to_cbor`.
fn json_as_cbor(value: &Value) -> Cbor {
    match value {
        Value::Null => Cbor::Null,
        Value::Bool(b) => Cbor::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Cbor::Integer(u.into()),
            (_, Some(i)) => Cbor::Integer(i.into()),
            _ => Cbor::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => Cbor::Bytes(s.as_bytes().to_vec()),
        Value::Array(items) => Cbor::Array(items.iter().map(json_as_cbor).collect()),
        Value::Object(fields) => Cbor::Map(
            fields
                .iter()
                .map(|(k, v)| (Cbor::Bytes(k.as_bytes().to_vec()), json_as_cbor(v)))
                .collect(),
        ),
    }
}

/// A legacy fixture rendered, with the JSON it rendered before CBOR existed.
fn legacy<T: DeserializeOwned + Serialize>(rel: &str) -> (RenderedDoc, Vec<u8>) {
    let typed: T = load(rel);
    let before = serde_json::to_vec(&typed).expect("encodes");
    (render_legacy(&typed).expect("renders"), before)
}

#[test]
fn every_document_kind_renders_the_same_document_in_cbor() {
    let records = [ApiServiceRecord {
        name: "v1.x.io",
        group: "x.io",
        version: "v1",
        group_priority_minimum: 1000,
        version_priority: 15,
    }];
    let built = render_legacy(&legacy_group_list(&records)).expect("renders");
    let built_json = serde_json::to_vec(&legacy_group_list(&records)).expect("encodes");
    let rows: Vec<(&str, (RenderedDoc, Vec<u8>))> = vec![
        ("/api", legacy::<APIVersions>(&format!("{KUBE}/api.json"))),
        (
            "/api/v1",
            legacy::<APIResourceList>(&format!("{KUBE}/api__v1.json")),
        ),
        (
            "/apis",
            legacy::<APIGroupList>(&format!("{KUBE}/apis.json")),
        ),
        ("/apis (built)", (built, built_json)),
        (
            "/apis/<g>",
            legacy::<APIGroup>(&format!("{OAUTH}/apis__oauth.openshift.io.json")),
        ),
        (
            "/apis/<g>/<v>",
            legacy::<APIResourceList>(&format!("{KUBE}/apis__apiregistration.k8s.io__v1.json")),
        ),
    ];
    for (name, (doc, before)) in &rows {
        check(name, doc, "application/json", CBOR);
        assert_eq!(
            doc.bytes,
            before[..],
            "{name}: JSON byte for byte as before"
        );
        assert_eq!(doc.etag, strong_etag(before), "{name}: ETag of the JSON");
    }

    for (dir, list) in [KUBE, OAUTH].map(|d| {
        (
            d,
            load::<APIGroupDiscoveryList>(&format!("{d}/aggregated_v2.json")),
        )
    }) {
        let entries = GroupVersionEntry::from_local_document(&list, Source::Local, |_, _| {
            Priority::default()
        });
        let merged = render_merged(&entries).expect("renders");
        for (how, docs) in [
            ("aggregated", render_aggregated(&list).expect("renders")),
            ("merged", merged),
        ] {
            let name = format!("{dir} {how}");
            check(&format!("{name} v2"), &docs.v2, V2_JSON, V2_CBOR);
            check(
                &format!("{name} v2beta1"),
                &docs.v2beta1,
                BETA_JSON,
                BETA_CBOR,
            );
            // One ETag for every representation: the hash of the v2 JSON.
            assert_eq!(docs.v2.etag, strong_etag(&docs.v2.bytes), "{name}");
            assert_eq!(docs.v2beta1.etag, docs.v2.etag, "{name}");
            let beta = from_cbor(&docs.v2beta1.cbor).expect("decodes");
            assert_eq!(beta["apiVersion"], APIDISCOVERY_V2BETA1, "{name}");
            assert_eq!(
                beta["items"],
                from_cbor(&docs.v2.cbor).expect("decodes")["items"]
            );
        }
    }
}

#[test]
fn aggregated_cbor_starts_like_kube_apiservers() {
    let entry = GroupVersionEntry::remote("m.io", "v1", Priority::default(), None, false);
    let docs = render_merged(&[entry]).expect("renders");
    // Tag 55799, map(4), b"kind", b"APIGroupDiscoveryList" (21 bytes), b"apiVersion".
    let mut head = vec![0xd9, 0xd9, 0xf7, 0xa4, 0x44];
    head.extend_from_slice(b"kind");
    head.push(0x55);
    head.extend_from_slice(b"APIGroupDiscoveryList");
    head.push(0x4a);
    head.extend_from_slice(b"apiVersion");
    assert!(
        docs.v2.cbor.starts_with(&head),
        "{:02x?}",
        &docs.v2.cbor[..40]
    );
    assert_eq!(
        from_cbor(&docs.v2.cbor).expect("decodes"),
        serde_json::json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {}, "items": [{"metadata": {"name": "m.io"},
            "versions": [{"version": "v1", "freshness": "Stale"}]}]})
    );
}

type Answer = Result<Negotiated, NotAcceptable>;
const NA: Answer = Err(NotAcceptable);
const LJ: Answer = Ok(Negotiated::Legacy {
    format: Format::Json,
});
const LC: Answer = Ok(Negotiated::Legacy {
    format: Format::Cbor,
});

const fn agg(version: AggregatedVersion, format: Format) -> Answer {
    Ok(Negotiated::Aggregated {
        version,
        no_peer: false,
        format,
    })
}
const V2J: Answer = agg(AggregatedVersion::V2, Format::Json);
const V2C: Answer = agg(AggregatedVersion::V2, Format::Cbor);
const BETAC: Answer = agg(AggregatedVersion::V2Beta1, Format::Cbor);

#[test]
fn negotiation_rows() {
    use Format::{Cbor, Json};
    let cbor_client = format!("{V2_CBOR},{KUBECTL}");
    let json_v2_preferred = format!("{V2_CBOR};q=0.8,{V2_JSON};q=0.9");
    let cbor_v2_preferred = format!("{V2_JSON};q=0.8,{V2_CBOR}");
    let table = "application/cbor;as=Table;g=meta.k8s.io;v=v1";
    let table_then_plain = format!("{table},application/cbor");
    let wildcard_v2 = "*/*;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    let protobuf_first = "application/vnd.kubernetes.protobuf, application/cbor";
    // (Accept, answer on /apis and /api, answer on /apis/<g> and /apis/, Status format)
    let rows: [(Option<&str>, Answer, Answer, Format); 28] = [
        (None, LJ, LJ, Json),
        (Some(""), LJ, LJ, Json),
        (Some("application/json"), LJ, LJ, Json),
        (Some("application/cbor"), LC, LC, Cbor),
        (Some("APPLICATION/CBOR"), LC, LC, Cbor),
        (Some("*/*"), LJ, LJ, Json),
        (Some("application/*"), LJ, LJ, Json),
        (Some("application/cbor, application/json"), LC, LC, Cbor),
        (Some("application/json, application/cbor"), LJ, LJ, Json),
        (
            Some("application/json;q=0.9, application/cbor"),
            LC,
            LC,
            Cbor,
        ),
        (
            Some("application/cbor;q=0.5, application/json;q=0.9"),
            LJ,
            LJ,
            Json,
        ),
        (Some("application/cbor;q=0.9, */*;q=0.8"), LC, LC, Cbor),
        // Equal quality: a concrete type before a wildcard, whatever the order sent.
        (Some("*/*, application/cbor"), LC, LC, Cbor),
        (Some("application/cbor;q=0, application/json"), LJ, LJ, Json),
        (Some(protobuf_first), LC, LC, Cbor),
        (Some("application/cbor;stream=watch"), LC, LC, Cbor),
        (Some("application/cbor;stream=other"), NA, NA, Json),
        (Some("application/yaml"), NA, NA, Json),
        (Some("application/cbor-seq"), NA, NA, Json),
        (Some(KUBECTL), V2J, LJ, Json),
        (Some(V2_CBOR), V2C, NA, Json),
        (Some(BETA_CBOR), BETAC, NA, Json),
        (Some(&cbor_client), V2C, LJ, Json),
        (Some(&json_v2_preferred), V2J, NA, Json),
        (Some(&cbor_v2_preferred), V2C, NA, Json),
        (Some(table), NA, NA, Json),
        (Some(&table_then_plain), LC, LC, Cbor),
        (Some(wildcard_v2), V2J, NA, Json),
    ];
    for (accept, root, group, status) in rows {
        let opts = NegotiateOptions::default();
        assert_eq!(
            negotiate(accept, Endpoint::Root, &opts),
            root,
            "/apis {accept:?}"
        );
        assert_eq!(
            negotiate(accept, Endpoint::LegacyOnly, &opts),
            group,
            "/apis/<g> {accept:?}"
        );
        assert_eq!(status_format(accept), status, "Status {accept:?}");
    }
    let no_beta = NegotiateOptions {
        serve_v2beta1: false,
    };
    assert_eq!(negotiate(Some(BETA_CBOR), Endpoint::Root, &no_beta), NA);
    let nopeer = format!("{V2_CBOR};profile=nopeer");
    assert_eq!(
        negotiate(Some(&nopeer), Endpoint::Root, &NegotiateOptions::default()),
        Ok(Negotiated::Aggregated {
            version: AggregatedVersion::V2,
            no_peer: true,
            format: Cbor
        })
    );
}

#[test]
fn content_types_follow_the_format() {
    let cases = [
        (AggregatedVersion::V2, Format::Json, V2_JSON),
        (AggregatedVersion::V2, Format::Cbor, V2_CBOR),
        (AggregatedVersion::V2Beta1, Format::Json, BETA_JSON),
        (AggregatedVersion::V2Beta1, Format::Cbor, BETA_CBOR),
    ];
    for (version, format, expected) in cases {
        let negotiated = Negotiated::Aggregated {
            version,
            no_peer: false,
            format,
        };
        assert_eq!(negotiated.content_type(), expected);
        assert_eq!(negotiated.format(), format);
    }
    assert_eq!(
        Negotiated::Legacy {
            format: Format::Cbor
        }
        .content_type(),
        CBOR
    );
    assert_eq!(Format::Cbor.media_type(), CBOR);
    assert_eq!(Format::default(), Format::Json);
}
