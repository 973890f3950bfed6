//! Audit IDs: the `auditID` of every event of one request, echoed to the caller in the
//! `Audit-ID` response header. kube-apiserver takes the caller's `Audit-ID` header when it sends
//! one (so an ID survives a hop through kube-apiserver's aggregator) and generates a UUID v4
//! otherwise; so does apiagg.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

use http::HeaderValue;

/// The request header (and response header) that carries the audit ID.
pub const HEADER: http::HeaderName = http::HeaderName::from_static("audit-id");

/// [`HEADER`] as apiagg writes it into pingora's headers: pingora writes a name given as text
/// as it is, and copies a `HeaderName` into a new buffer per request.
pub const HEADER_WIRE: &str = "Audit-ID";

/// Incoming IDs longer than this are not taken (a new one is generated). kube-apiserver sets no
/// bound; a UUID has 36 characters, so 128 leaves room for any other ID scheme.
pub const MAX_HEADER_LEN: usize = 128;

/// The audit ID of one request: a generated UUID v4 (36 characters, no allocation) or the value
/// of a valid incoming `Audit-ID` header.
#[derive(Clone, PartialEq, Eq)]
pub struct AuditId(Repr);

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    Uuid([u8; 36]),
    Header(HeaderValue),
}

impl AuditId {
    /// A new random UUID v4. The random bits come from a per-thread generator seeded once, so
    /// generating an ID makes no system call. IDs are unique, not secret: nothing may rely on
    /// them being unpredictable (kube-apiserver's are not a secret either: they are echoed).
    #[allow(clippy::new_without_default)]
    pub fn new() -> AuditId {
        let (high, low) = (next_random(), next_random());
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&high.to_be_bytes());
        bytes[8..].copy_from_slice(&low.to_be_bytes());
        // Version 4 (random) and the RFC 4122 variant.
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = [b'-'; 36];
        let mut at = 0;
        for (i, byte) in bytes.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                at += 1;
            }
            text[at] = HEX[usize::from(byte >> 4)];
            text[at + 1] = HEX[usize::from(byte & 0x0f)];
            at += 2;
        }
        AuditId(Repr::Uuid(text))
    }

    /// The ID a caller sent in `Audit-ID`, if it is usable: not empty, at most
    /// [`MAX_HEADER_LEN`] bytes, visible ASCII only (no space or control character, so it is
    /// written back into logs and headers exactly). kube-apiserver takes any value; apiagg
    /// generates a new ID for a value it refuses.
    pub fn from_header(value: &[u8]) -> Option<AuditId> {
        if value.is_empty()
            || value.len() > MAX_HEADER_LEN
            || !value.iter().all(|b| (0x21..=0x7e).contains(b))
        {
            return None;
        }
        HeaderValue::from_bytes(value)
            .ok()
            .map(|v| AuditId(Repr::Header(v)))
    }

    /// The ID, as written in events.
    pub fn as_str(&self) -> &str {
        let bytes = match &self.0 {
            Repr::Uuid(text) => &text[..],
            Repr::Header(value) => value.as_bytes(),
        };
        // Both forms are visible ASCII by construction.
        std::str::from_utf8(bytes).unwrap_or("")
    }

    /// The ID as an `Audit-ID` response header value (computed once per request by the caller).
    pub fn header_value(&self) -> HeaderValue {
        match &self.0 {
            Repr::Header(value) => value.clone(),
            Repr::Uuid(text) => HeaderValue::from_bytes(text)
                .unwrap_or_else(|_| HeaderValue::from_static("invalid")),
        }
    }
}

impl std::fmt::Debug for AuditId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AuditId").field(&self.as_str()).finish()
    }
}

impl std::fmt::Display for AuditId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

thread_local! {
    /// wyrand state of this thread; 0 until first used.
    static STATE: Cell<u64> = const { Cell::new(0) };
}

/// 64 random bits from this thread's wyrand generator, seeded on first use from the standard
/// library's per-process random keys, the thread and the clock.
pub(super) fn next_random() -> u64 {
    STATE.with(|state| {
        let mut s = state.get();
        if s == 0 {
            s = seed();
        }
        s = s.wrapping_add(0xa076_1d64_78bd_642f);
        state.set(s);
        let t = u128::from(s).wrapping_mul(u128::from(s ^ 0xe703_7ed1_a0b4_28db));
        ((t >> 64) as u64) ^ (t as u64)
    })
}

fn seed() -> u64 {
    // `RandomState::new()` carries keys drawn from the OS once per thread.
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    std::hash::Hash::hash(&std::thread::current().id(), &mut hasher);
    hasher.finish() | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_uuid_v4_text_and_distinct() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let id = AuditId::new();
            let text = id.as_str();
            assert_eq!(text.len(), 36, "{text}");
            for (i, c) in text.char_indices() {
                if matches!(i, 8 | 13 | 18 | 23) {
                    assert_eq!(c, '-', "{text}");
                } else {
                    assert!(c.is_ascii_hexdigit() && !c.is_ascii_uppercase(), "{text}");
                }
            }
            assert_eq!(&text[14..15], "4", "version: {text}");
            assert!(
                matches!(&text[19..20], "8" | "9" | "a" | "b"),
                "variant: {text}"
            );
            assert_eq!(id.header_value().as_bytes(), text.as_bytes());
            assert!(seen.insert(text.to_string()), "repeated {text}");
        }
    }

    #[test]
    fn other_threads_generate_other_ids() {
        let here = AuditId::new();
        let there = std::thread::spawn(AuditId::new).join().expect("thread");
        assert_ne!(here, there);
    }

    #[test]
    fn incoming_ids_are_taken_when_valid() {
        assert_eq!(HEADER.as_str(), "audit-id");
        assert!(HEADER_WIRE.eq_ignore_ascii_case(HEADER.as_str()));
        let id = AuditId::from_header(b"1a2b3c4d-0000-4000-8000-000000000001").expect("uuid");
        assert_eq!(id.as_str(), "1a2b3c4d-0000-4000-8000-000000000001");
        assert_eq!(id.header_value(), "1a2b3c4d-0000-4000-8000-000000000001");
        assert!(AuditId::from_header(b"not-a-uuid-but-fine_42").is_some());
        assert!(AuditId::from_header(&[b'x'; MAX_HEADER_LEN]).is_some());
    }

    #[test]
    fn unusable_incoming_ids_are_refused() {
        for bad in [
            &b""[..],
            b"with space",
            b"tab\there",
            b"new\nline",
            b"caf\xc3\xa9",
            b"\x7f",
            &[b'x'; MAX_HEADER_LEN + 1],
        ] {
            assert!(AuditId::from_header(bad).is_none(), "{bad:?}");
        }
    }
}
