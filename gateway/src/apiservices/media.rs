//! Media types of the APIService API, negotiated as kube-apiserver 1.37 negotiates them, for a
//! server that writes JSON or CBOR and reads JSON or YAML (decoded by `writes.rs`, YAML
//! bounded): a body in any other format (CBOR, protobuf) is refused with 415, on which clients
//! send it again as JSON (client-go's CBOR fallback); an answer goes in CBOR when the most
//! preferred acceptable `Accept` clause names it (objects, lists, Tables; watch events as a CBOR
//! sequence; the request path encodes them), and an `Accept` that allows neither is refused
//! with 406.

use super::answers::status;
use super::Answer;
use apiagg_apis::Reason;

/// The request body formats the API reads, in kube-apiserver's order.
const READABLE: &str = "application/json, application/yaml";

/// The answer formats the API writes.
const WRITABLE: &str = "application/json, application/cbor";

/// How a request body is written (`Content-Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    /// JSON (also when no `Content-Type` is sent, as upstream).
    Json,
    /// YAML (`kubectl create --raw` with a YAML file, curl users).
    Yaml,
}

/// The format of a create or replace body; 415 for one the API cannot read.
pub fn body_format(content_type: &str) -> Result<BodyFormat, Answer> {
    match base(content_type).as_str() {
        "" | "application/json" => Ok(BodyFormat::Json),
        "application/yaml" => Ok(BodyFormat::Yaml),
        _ => Err(status(Reason::UnsupportedMediaType, &format!(
                "the body of the request was in an unknown format - accepted media types include: {READABLE}"
            ),
            None,
        )),
    }
}

/// `Ok` when `accept` allows a JSON or CBOR answer (no `Accept` allows anything); otherwise
/// the 406.
pub fn negotiate(accept: &str) -> Result<(), Answer> {
    if accept.trim().is_empty() || accept.split(',').any(allows_json) || cbor_answer(accept) {
        return Ok(());
    }
    Err(status(
        Reason::NotAcceptable,
        &format!("only the following media types are accepted: {WRITABLE}"),
        None,
    ))
}

/// Whether the answer goes in CBOR: the most preferred acceptable clause of `accept` names
/// `application/cbor` (a Table's clause too), not JSON or a wildcard.
pub fn cbor_answer(accept: &str) -> bool {
    apiagg_discovery::media_ranges(accept)
        .iter()
        .filter(|clause| !clause.refused())
        .find_map(|clause| {
            if clause.is(apiagg_apis::CBOR) {
                Some(true)
            } else if clause.accepts_json() {
                Some(false)
            } else {
                None
            }
        })
        .unwrap_or(false)
}

/// Whether one media range of `Accept` covers JSON (and is not refused with `q=0`).
fn allows_json(range: &str) -> bool {
    let refused = range.split(';').skip(1).any(|p| {
        p.trim()
            .strip_prefix("q=")
            .and_then(|q| q.trim().parse::<f32>().ok())
            .is_some_and(|q| q <= 0.0)
    });
    !refused
        && matches!(
            base(range).as_str(),
            "application/json" | "application/*" | "*/*"
        )
}

/// The type and subtype of a media type, lowercased, without parameters.
fn base(media_type: &str) -> String {
    media_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(answer: Answer) -> u16 {
        match answer {
            Answer::Done { code, .. } => code,
            Answer::Failed { failure, .. } => failure.code,
            Answer::Watch(_) => 0,
        }
    }

    #[test]
    fn answers_are_json_or_cbor_as_the_client_prefers() {
        for json in [
            "",
            "application/json",
            "application/json, application/cbor",
            "application/cbor;q=0.5, application/json",
            "application/json;as=Table;v=v1;g=meta.k8s.io, application/json",
            "application/vnd.kubernetes.protobuf, */*",
            "Application/JSON",
            "application/*",
        ] {
            assert!(negotiate(json).is_ok(), "{json:?}");
            assert!(!cbor_answer(json), "{json:?}");
        }
        for cbor in [
            "application/cbor",
            "application/cbor, application/json",
            "application/cbor;q=1, application/json;q=0.5",
            "application/json;q=0, application/cbor",
            "application/cbor;as=Table;v=v1;g=meta.k8s.io, application/cbor",
            "application/vnd.kubernetes.protobuf, application/cbor, application/json",
        ] {
            assert!(negotiate(cbor).is_ok(), "{cbor:?}");
            assert!(cbor_answer(cbor), "{cbor:?}");
        }
        for refused in [
            "application/vnd.kubernetes.protobuf",
            "application/yaml",
            "application/json;q=0, application/cbor;q=0",
        ] {
            let answer = negotiate(refused).expect_err(refused);
            assert_eq!(code(answer), 406, "{refused:?}");
        }
    }

    #[test]
    fn bodies_are_read_in_json_or_yaml_and_refused_with_415_otherwise() {
        assert_eq!(body_format("").ok(), Some(BodyFormat::Json));
        assert_eq!(
            body_format("application/json; charset=utf-8").ok(),
            Some(BodyFormat::Json)
        );
        assert_eq!(body_format("application/yaml").ok(), Some(BodyFormat::Yaml));
        for refused in [
            "application/cbor",
            "application/vnd.kubernetes.protobuf",
            "text/plain",
        ] {
            let answer = body_format(refused).expect_err(refused);
            assert_eq!(code(answer), 415, "{refused:?}");
        }
    }
}
