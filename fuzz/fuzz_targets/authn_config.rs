//! The `--authentication-config` file (`AuthenticationConfiguration`) through the loader the
//! gateway calls (`apiagg_authn::load`, from `gateway/src/auth/jwt.rs`): strict YAML or JSON
//! decoding, every validation of kube-apiserver with its field paths, every CEL expression
//! compiled with its cost estimate. A file that loads then maps one fixed set of claims with
//! each of its issuers (the compiled rules and mappings run once).
//!
//! Input: the file's bytes.
//!
//! Checked beyond "no panic": a refused file names at least one problem; a loaded issuer has an
//! `https://<host>` URL and at least one audience; a mapped user is never in `system:` (apiagg's
//! rule).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};

fn claims() -> &'static Map<String, Value> {
    static CLAIMS: OnceLock<Map<String, Value>> = OnceLock::new();
    CLAIMS.get_or_init(|| {
        let claims = json!({
            "iss": "https://login.example.com/realms/platform",
            "aud": ["kubernetes"],
            "sub": "7c1e2b", "email": "alice@example.com", "email_verified": true,
            "hd": "example.com", "groups": ["dev", "ops"], "tenant": "blue",
            "iat": 1_749_990_000, "exp": 1_750_000_600,
            "repository": "org/app", "ref": "refs/heads/main", "repository_owner": "org",
        });
        match claims {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    match apiagg_authn::load(data) {
        Err(errors) => {
            assert!(!errors.0.is_empty(), "refused without a reason");
            let _ = errors.to_string();
        }
        Ok(loaded) => {
            for issuer in &loaded.jwt {
                // With a host: what Go and the gateway's WHATWG client both read as one.
                let https = issuer
                    .issuer
                    .get(..8)
                    .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
                let host = if https { &issuer.issuer[8..] } else { "/" };
                assert!(
                    !host.is_empty() && !host.starts_with('/'),
                    "{:?}",
                    issuer.issuer
                );
                assert!(!issuer.audiences.is_empty(), "{:?}", issuer.issuer);
                if let Ok(identity) = issuer.map(claims()) {
                    assert!(!identity.username.is_empty(), "{identity:?}");
                    assert!(!identity.username.starts_with("system:"), "{identity:?}");
                    assert!(
                        !identity.groups.iter().any(|g| g.starts_with("system:")),
                        "{identity:?}"
                    );
                }
            }
            if let Some(anonymous) = &loaded.anonymous {
                for path in anonymous.paths.iter().flatten() {
                    assert!(path.starts_with('/'), "{path:?}");
                }
            }
        }
    }
});
