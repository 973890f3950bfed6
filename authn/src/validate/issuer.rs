//! `jwt[i].issuer`: URLs as Go's `url.Parse` reads them, audiences, the certificate authority
//! as `cert.NewPoolFromBytes` reads it, the egress selector.

use std::collections::HashSet;

use super::field::{quote, Errors};
use crate::config;

/// `issuer`: URLs, audiences, certificate authority, egress selector.
pub(super) fn issuer(errs: &mut Errors, issuer: &config::Issuer, path: &str) {
    let url_path = format!("{path}.url");
    if issuer.url.is_empty() {
        errs.required(&url_path, "");
    } else {
        https_url(errs, &url_path, &issuer.url);
    }
    if !issuer.discovery_url.is_empty() {
        let discovery_path = format!("{path}.discoveryURL");
        if !issuer.url.is_empty()
            && issuer.url.trim_end_matches('/') == issuer.discovery_url.trim_end_matches('/')
        {
            errs.invalid(
                &discovery_path,
                &issuer.discovery_url,
                "discoveryURL must be different from URL",
            );
        }
        https_url(errs, &discovery_path, &issuer.discovery_url);
    }

    let audiences_path = format!("{path}.audiences");
    let policy_path = format!("{path}.audienceMatchPolicy");
    let policy = issuer.audience_match_policy.as_str();
    if issuer.audiences.is_empty() {
        errs.required(
            &audiences_path,
            &format!("at least one {audiences_path} is required"),
        );
    } else {
        let mut seen = HashSet::new();
        for (i, audience) in issuer.audiences.iter().enumerate() {
            let path = format!("{audiences_path}[{i}]");
            if audience.is_empty() {
                errs.required(&path, "");
            }
            if !seen.insert(audience.as_str()) {
                errs.duplicate(&path, audience);
            }
        }
        if issuer.audiences.len() > 1 && policy != "MatchAny" {
            errs.invalid(
                &policy_path,
                policy,
                "audienceMatchPolicy must be MatchAny for multiple audiences",
            );
        }
        if issuer.audiences.len() == 1 && !policy.is_empty() && policy != "MatchAny" {
            errs.invalid(
                &policy_path,
                policy,
                "audienceMatchPolicy must be empty or MatchAny for single audience",
            );
        }
    }

    if !issuer.certificate_authority.is_empty() {
        if let Err(why) = certificates(issuer.certificate_authority.as_bytes()) {
            errs.invalid(&format!("{path}.certificateAuthority"), "<omitted>", &why);
        }
    }
    let selector = issuer.egress_selector_type.as_str();
    if !matches!(selector, "" | "controlplane" | "cluster") {
        let detail = "egress selector must be either controlplane or cluster";
        errs.invalid(&format!("{path}.egressSelectorType"), selector, detail);
    }
}

/// Go's `url.Parse` as far as the checks go (scheme, user, query, fragment), then the WHATWG
/// parse the gateway's client will do for an `https` URL.
fn https_url(errs: &mut Errors, path: &str, raw: &str) {
    let parse_error = |why: &str| format!("parse {}: {why}", quote(raw));
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return errs.invalid(
            path,
            raw,
            &parse_error("net/url: invalid control character in URL"),
        );
    }
    let (without_fragment, fragment) = raw.split_once('#').unwrap_or((raw, ""));
    let scheme_end = without_fragment
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_alphabetic() || (i > 0 && (c.is_ascii_digit() || "+-.".contains(c))))
        })
        .filter(|&(_, c)| c == ':')
        .map(|(i, _)| i);
    let (scheme, rest) = match scheme_end {
        Some(0) => return errs.invalid(path, raw, &parse_error("missing protocol scheme")),
        Some(i) => (
            without_fragment[..i].to_ascii_lowercase(),
            &without_fragment[i + 1..],
        ),
        None => (String::new(), without_fragment),
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    if scheme.is_empty()
        && !rest.starts_with('/')
        && rest.split('/').next().is_some_and(|s| s.contains(':'))
    {
        return errs.invalid(
            path,
            raw,
            &parse_error("first path segment in URL cannot contain colon"),
        );
    }
    let has_user = rest.strip_prefix("//").is_some_and(|r| {
        r.split('/')
            .next()
            .is_some_and(|authority| authority.contains('@'))
    });
    if scheme != "https" {
        errs.invalid(path, raw, "URL scheme must be https");
    } else if let Err(e) = url::Url::parse(raw) {
        return errs.invalid(path, raw, &parse_error(&e.to_string()));
    } else if !rest
        .strip_prefix("//")
        .is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
    {
        // `https:/host` and `https:///host`: Go reads no host (kube-apiserver cannot fetch it),
        // the WHATWG parse of the gateway's client reads `host` (and `https:/user@host` a user).
        errs.invalid(path, raw, "URL must have a host (https://<host>/...)");
    }
    if has_user {
        errs.invalid(path, raw, "URL must not contain a username or password");
    }
    if !query.is_empty() {
        errs.invalid(path, raw, "URL must not contain a query");
    }
    if !fragment.is_empty() {
        errs.invalid(path, raw, "URL must not contain a fragment");
    }
}

/// `certificateAuthority` as `cert.NewPoolFromBytes` reads it: PEM `CERTIFICATE` blocks, each a
/// certificate, at least one.
fn certificates(pem: &[u8]) -> Result<(), String> {
    use x509_parser::error::PEMError;
    let mut found = false;
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let block = match block {
            Ok(block) => block,
            // pem.Decode skips a block it cannot read and goes on.
            Err(PEMError::Base64DecodeError | PEMError::InvalidHeader) => continue,
            Err(_) => break,
        };
        if block.label != "CERTIFICATE" {
            continue;
        }
        match x509_parser::parse_x509_certificate(&block.contents) {
            Ok(([], _)) => found = true,
            Ok(_) => return Err("x509: trailing data".to_string()),
            Err(e) => return Err(format!("x509: malformed certificate: {e}")),
        }
    }
    if found {
        Ok(())
    } else {
        Err("data does not contain any valid RSA or ECDSA certificates".to_string())
    }
}
