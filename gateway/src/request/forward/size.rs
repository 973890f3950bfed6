//! How large a forwarded head may be: what kube-apiserver accepts, so that nothing apiagg sends
//! to a backend or the delegate is refused there for its size. kube-apiserver reads at most
//! 1 MiB of request head (k8s.io/apiserver `secure_serving.go`, `MaxHeaderBytes: 1 << 20`; over
//! HTTP/2 Go bounds the header list by the same number) and, built with Go 1.27 or newer, at most
//! 16,384 header values (`header_value_count_go127.go`, `maxHeaderValueCount`; Go's own default
//! is 500). kube-aggregator forwards one `X-Remote-Group` per group, as apiagg does: a caller in
//! so many groups that the head would pass either limit gets 431 from apiagg, naming the limit,
//! before anything is sent.
//!
//! Checked once per request, before a backend connection is taken: the caller's identity
//! headers are measured once per user (`User::remote_size`); the client's head is bounded
//! without reading it (the raw HTTP/1.1 head's length, or apiagg's HTTP/2 header-list limit), and
//! only a head that may be near the limit is measured field by field.

use pingora_http::RequestHeader;

use crate::auth::{FieldsSize, FIELD_OVERHEAD};
use pingora_core::protocols::http::ServerSession as Session;

/// Header fields a forwarded head may carry: kube-apiserver's `maxHeaderValueCount`.
pub const MAX_FORWARDED_FIELDS: usize = 16_384;
/// Bytes of header fields a forwarded head may carry, counted as HTTP/2 counts a header list
/// (name, value and 32 bytes a field; more than HTTP/1.1's `name: value\r\n`): kube-apiserver's
/// `MaxHeaderBytes`, 1 MiB.
pub const MAX_FORWARDED_BYTES: usize = 1 << 20;
/// The largest header list an HTTP/2 client may send apiagg (its `SETTINGS_MAX_HEADER_LIST_SIZE`,
/// pingora's default): a larger one is answered 431 by the HTTP/2 layer itself, without a body.
pub const MAX_H2_HEADER_LIST: u32 = 64 * 1024;

/// Fields apiagg adds besides the identity: `Host`, `X-Forwarded-For`, `-Proto`, `-Host` and
/// `-Uri`, `Authorization` (its own, to the delegate), `Audit-ID`, `traceparent`, `tracestate`.
const ADDED_FIELDS: usize = 9;
/// Their bytes, but for the path and the token (counted as they are): two authorities (a host
/// name is at most 253 bytes), an address, a 128-byte audit ID, apiagg's trace context, names
/// and overheads.
const ADDED_BYTES: usize = 4096;

/// A head that would be larger than kube-apiserver accepts: 431 `RequestHeaderFieldsTooLarge`.
/// Not retryable: the caller's identity (or its own headers) must shrink.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TooLarge {
    /// More header fields than [`MAX_FORWARDED_FIELDS`].
    #[error(
        "the request would be forwarded with {fields} header fields ({identity} of them stating \
         the caller's identity, one per group), more than the limit of {MAX_FORWARDED_FIELDS} \
         header values kube-apiserver accepts"
    )]
    Fields {
        /// The fields the head would carry (at most).
        fields: usize,
        /// Those stating the caller.
        identity: usize,
    },
    /// More bytes than [`MAX_FORWARDED_BYTES`].
    #[error(
        "the request would be forwarded with {bytes} bytes of header fields ({identity} of them \
         stating the caller's identity; each field counted as its name, its value and 32 bytes, \
         as HTTP/2 counts), more than the limit of {MAX_FORWARDED_BYTES} bytes (1 MiB) \
         kube-apiserver accepts"
    )]
    Bytes {
        /// The bytes the head would carry (at most).
        bytes: usize,
        /// Those stating the caller.
        identity: usize,
    },
}

/// Checks that the head forwarded for the request of `session` stays within what
/// kube-apiserver accepts, with `identity` stamped on it and apiagg's own `Authorization` of
/// `token` bytes. The client's headers count as received (those apiagg removes included).
pub fn check(session: &Session, identity: FieldsSize, token: usize) -> Result<(), TooLarge> {
    let request = session.req_header();
    let received = match session {
        // The raw head holds every name and value (and more): no field needs to be read.
        Session::H1(h1) => {
            Some(h1.get_headers_raw_bytes().len() + FIELD_OVERHEAD * request.headers.len())
        }
        Session::H2(_) => Some(MAX_H2_HEADER_LIST as usize),
        _ => None,
    };
    check_head(request, received, identity, token)
}

/// [`check`] for `request`, whose fields are at most `received` bytes (`None`: unknown).
fn check_head(
    request: &RequestHeader,
    received: Option<usize>,
    identity: FieldsSize,
    token: usize,
) -> Result<(), TooLarge> {
    let fields = request.headers.len() + identity.fields + ADDED_FIELDS;
    if fields > MAX_FORWARDED_FIELDS {
        return Err(TooLarge::Fields {
            fields,
            identity: identity.fields,
        });
    }
    // The target goes as the request's target and again as `X-Forwarded-Uri`.
    let target = request.uri.path_and_query().map_or(0, |p| p.as_str().len());
    let added = identity.bytes + token + ADDED_BYTES + 2 * target;
    if received.is_some_and(|at_most| added + at_most <= MAX_FORWARDED_BYTES) {
        return Ok(());
    }
    // Near the limit: the client's fields as they are.
    let bytes = added + received_bytes(request);
    if bytes > MAX_FORWARDED_BYTES {
        return Err(TooLarge::Bytes {
            bytes,
            identity: identity.bytes,
        });
    }
    Ok(())
}

/// The bytes of the client's header fields, as HTTP/2 counts them.
fn received_bytes(request: &RequestHeader) -> usize {
    request
        .headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + FIELD_OVERHEAD)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(fields: usize, bytes: usize) -> FieldsSize {
        FieldsSize { fields, bytes }
    }

    fn request(headers: &[(&str, &str)]) -> RequestHeader {
        let mut head = RequestHeader::build("GET", b"/apis/g/v/things", None).expect("head");
        for (name, value) in headers {
            head.append_header(name.to_string(), *value)
                .expect("header");
        }
        head
    }

    #[test]
    fn identities_within_kube_apiservers_limits_pass_and_larger_ones_name_the_limit() {
        let head = request(&[("accept", "application/json")]);
        let h2 = Some(MAX_H2_HEADER_LIST as usize);
        let check = |identity, token| check_head(&head, h2, identity, token);
        // 600 groups of 9 bytes: 600 × (14 + 9 + 32) bytes.
        assert_eq!(check(size(601, 601 * 55), 0), Ok(()));
        let countless = check(size(MAX_FORWARDED_FIELDS, 0), 0);
        assert!(
            matches!(countless, Err(TooLarge::Fields { identity, .. }) if identity == MAX_FORWARDED_FIELDS),
            "{countless:?}"
        );
        let wordy = check(size(7_300, 7_300 * 146), 0);
        assert!(
            matches!(wordy, Err(TooLarge::Bytes { identity, .. }) if identity == 7_300 * 146),
            "{wordy:?}"
        );
        let message = wordy.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("limit of 1048576 bytes"), "{message}");
        // Near the limit the client's fields are measured; apiagg's own token counts too.
        let target = 2 * "/apis/g/v/things".len();
        let received = "accept".len() + "application/json".len() + FIELD_OVERHEAD;
        let room = MAX_FORWARDED_BYTES - ADDED_BYTES - target - received;
        assert_eq!(check(size(1, room), 0), Ok(()));
        assert_eq!(check_head(&head, None, size(1, room), 0), Ok(()));
        let over = check(size(1, room - 100), 101);
        assert_eq!(
            over,
            Err(TooLarge::Bytes {
                bytes: MAX_FORWARDED_BYTES + 1,
                identity: room - 100
            })
        );
    }
}
