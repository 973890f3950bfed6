//! The `Accept` and `Accept-Encoding` headers clients send, through the one parser
//! (`apiagg_discovery::accept`) and discovery's negotiation on `/apis`, `/apis/` and
//! `/apis/<group>` (`gateway/src/request/answers.rs`, `openapi.rs`).
//!
//! Input: the header value (lossy UTF-8, as `HeaderValue::to_str` only passes visible ASCII).
#![no_main]

use apiagg_discovery::{
    accepts_coding, media_ranges, negotiate, Endpoint, NegotiateOptions, Negotiated,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let header = String::from_utf8_lossy(data);
    let header = header.as_ref();
    for serve_v2beta1 in [true, false] {
        let options = NegotiateOptions { serve_v2beta1 };
        for endpoint in [Endpoint::Root, Endpoint::LegacyOnly] {
            match negotiate(Some(header), endpoint, &options) {
                Ok(
                    n @ Negotiated::Aggregated {
                        version, format, ..
                    },
                ) => {
                    assert_eq!(endpoint, Endpoint::Root, "aggregated only at /apis");
                    assert_eq!(n.format(), format);
                    assert_eq!(n.content_type(), version.content_type(format));
                }
                Ok(n) => {
                    let _ = n.content_type();
                }
                Err(e) => {
                    let _ = e.message();
                }
            }
        }
    }
    for clause in media_ranges(header) {
        let _ = (
            clause.refused(),
            clause.accepts_json(),
            clause.param("profile"),
        );
        let _ = clause.is("application/com.github.proto-openapi.spec.v2@v1.0+protobuf");
    }
    let _ = accepts_coding(header, "gzip");
});
