//! Request bodies that are not JSON but have a JSON form: CBOR (`application/cbor`,
//! `application/apply-patch+cbor`) and YAML (`application/yaml`, `application/apply-patch+yaml`),
//! transcoded to JSON for `requestObject` as kube-apiserver records them since kubernetes#139419
//! (its patch handler transcodes an apply patch to JSON before the audit logs it; a create or
//! update body is decoded and logged as JSON anyway). The work runs when an event is written, on
//! the audit backend's thread, for bodies the level asked for and the capture limit kept; the
//! JSON must fit the same limit. YAML is read with the strategy crate's bounded reader, so a
//! document whose aliases would expand past its limit is refused, not expanded.

use serde_json::Value;

use super::Omitted;

/// How a captured body is encoded, read from its `Content-Type` (type and subtype, without
/// parameters, case-insensitive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Encoding {
    /// JSON, or anything else: written only when the bytes are JSON.
    #[default]
    Json,
    /// CBOR (KEP-4222), transcoded to JSON.
    Cbor,
    /// YAML, transcoded to JSON.
    Yaml,
}

impl Encoding {
    /// The encoding of a body sent with `content_type`.
    pub(crate) fn of_content_type(content_type: &str) -> Encoding {
        let media = content_type.split(';').next().unwrap_or("").trim();
        let is = |name: &str| media.eq_ignore_ascii_case(name);
        if is("application/cbor") || is("application/apply-patch+cbor") {
            Encoding::Cbor
        } else if is("application/yaml") || is("application/apply-patch+yaml") {
            Encoding::Yaml
        } else {
            Encoding::Json
        }
    }

    /// The name used in the annotation of a body that could not be transcoded.
    fn name(self) -> &'static str {
        match self {
            Encoding::Json => "JSON",
            Encoding::Cbor => "CBOR",
            Encoding::Yaml => "YAML",
        }
    }
}

/// The JSON value of a CBOR or YAML body (`None` for JSON, which is rendered as it is), or why
/// there is none.
pub(super) fn transcode(bytes: &[u8], encoding: Encoding) -> Option<Result<Value, Omitted>> {
    let value = match encoding {
        Encoding::Json => return None,
        Encoding::Cbor => apiagg_apis::from_cbor(bytes).ok(),
        Encoding::Yaml => apiagg_strategy::yaml_body(bytes).ok(),
    };
    Some(value.ok_or(Omitted::NotTranscoded {
        from: encoding.name(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yaml_alias_bomb_is_refused_not_expanded() {
        // Ten levels of nine aliases: 9^10 strings once expanded, a few hundred bytes as sent.
        let mut bomb = String::from("a: &a [\"lol\"]\n");
        for level in 1..=10 {
            let prev = (b'a' + level - 1) as char;
            let this = (b'a' + level) as char;
            let refs = vec![format!("*{prev}"); 9].join(", ");
            bomb.push_str(&format!("{this}: &{this} [{refs}]\n"));
        }
        let transcoded = transcode(bomb.as_bytes(), Encoding::Yaml);
        assert!(
            matches!(
                transcoded,
                Some(Err(Omitted::NotTranscoded { from: "YAML" }))
            ),
            "{transcoded:?}"
        );
        // The control: the same document without the aliases' expansion is read.
        let small = transcode(b"a: &a [lol]\nb: [*a]\n", Encoding::Yaml);
        assert!(matches!(small, Some(Ok(_))), "{small:?}");
    }

    #[test]
    fn content_types_name_their_encoding() {
        let cases = [
            ("application/cbor", Encoding::Cbor),
            (
                "application/apply-patch+cbor; charset=utf-8",
                Encoding::Cbor,
            ),
            ("Application/CBOR", Encoding::Cbor),
            ("application/apply-patch+yaml", Encoding::Yaml),
            ("application/yaml;charset=utf-8", Encoding::Yaml),
            ("application/json", Encoding::Json),
            ("application/merge-patch+json", Encoding::Json),
            ("application/vnd.kubernetes.protobuf", Encoding::Json),
            ("", Encoding::Json),
        ];
        for (content_type, want) in cases {
            assert_eq!(
                Encoding::of_content_type(content_type),
                want,
                "{content_type}"
            );
        }
    }

    #[test]
    fn cbor_and_yaml_become_json_and_garbage_says_why() {
        let json = serde_json::json!({"kind": "Flunder", "spec": {"n": 1, "on": true}});
        let cbor = apiagg_apis::to_cbor(&json).expect("cbor");
        let yaml = b"kind: Flunder\nspec:\n  n: 1\n  on: true\n";
        assert_eq!(transcode(&cbor, Encoding::Cbor), Some(Ok(json.clone())));
        assert_eq!(transcode(yaml, Encoding::Yaml), Some(Ok(json)));
        assert_eq!(transcode(b"{}", Encoding::Json), None);
        let refused = Omitted::NotTranscoded { from: "CBOR" };
        assert_eq!(transcode(b"\xff\x00", Encoding::Cbor), Some(Err(refused)));
        let bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n".to_string()
            + &(b'b'..=b'k')
                .map(|c| {
                    let p = (c - 1) as char;
                    let c = c as char;
                    format!(
                        "{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
                    )
                })
                .collect::<String>();
        let refused = Omitted::NotTranscoded { from: "YAML" };
        assert_eq!(
            transcode(bomb.as_bytes(), Encoding::Yaml),
            Some(Err(refused))
        );
    }
}
