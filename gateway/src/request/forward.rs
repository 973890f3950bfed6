//! THE header policy of every forwarded request, used by the proxy and the upgrade tunnel alike:
//! the client's identity claims (`X-Remote-*`) never pass; its credentials (`Authorization`,
//! `Proxy-Authorization`, `Impersonate-*`) do not reach remote backends; `Host` names the
//! endpoint; `X-Forwarded-For/Proto/Host/Uri` say where the request came from.

use std::net::IpAddr;

use http::HeaderName;
use pingora_error::Result;
use pingora_http::RequestHeader;

/// What a forwarded request carries besides the client's own headers and the endpoint.
#[derive(Debug, Clone, Copy)]
pub struct Forwarding {
    /// The client's address, appended to `X-Forwarded-For`.
    pub client_ip: Option<IpAddr>,
    /// `https` when apiagg's listener serves TLS, else `http`.
    pub proto: &'static str,
    /// Remove the client's credentials (remote backends; the delegate gets them).
    pub strip_credentials: bool,
}

/// Whether a client header must not be forwarded.
pub fn is_hidden(name: &HeaderName, strip_credentials: bool) -> bool {
    let name = name.as_str();
    name.starts_with("x-remote-")
        || (strip_credentials
            && (name == "authorization"
                || name == "proxy-authorization"
                || name.starts_with("impersonate-")))
}

/// Applies the policy to the request head pingora sends to the endpoint at `authority`
/// (`host:port`, for `Host` and `X-Forwarded-Host`).
pub fn apply(request: &mut RequestHeader, forwarding: &Forwarding, authority: &str) -> Result<()> {
    let hidden: Vec<HeaderName> = request
        .headers
        .keys()
        .filter(|name| is_hidden(name, forwarding.strip_credentials))
        .cloned()
        .collect();
    for name in hidden {
        request.remove_header(&name);
    }
    request.insert_header("Host", authority)?;
    if let Some(ip) = forwarding.client_ip {
        let prior = request
            .headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty());
        let value = match prior {
            Some(prior) => format!("{prior}, {ip}"),
            None => ip.to_string(),
        };
        request.insert_header("X-Forwarded-For", value)?;
    }
    request.insert_header("X-Forwarded-Proto", forwarding.proto)?;
    request.insert_header("X-Forwarded-Host", authority)?;
    let path = request.uri.path().to_string();
    request.insert_header("X-Forwarded-Uri", path)?;
    Ok(())
}

/// The HTTP/1.1 head the upgrade tunnel writes to the backend: the same policy, serialized.
pub fn upgrade_head(
    request: &RequestHeader,
    forwarding: &Forwarding,
    authority: &str,
) -> Result<Vec<u8>> {
    let mut request = request.clone();
    apply(&mut request, forwarding, authority)?;
    let target = request.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut head = format!(
        "{} {target} HTTP/1.1\r\nHost: {}\r\n",
        request.method, authority
    )
    .into_bytes();
    for (name, value) in request.headers.iter() {
        if name == http::header::HOST {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> RequestHeader {
        let mut req =
            RequestHeader::build("GET", b"/apis/a.io/v1/x/exec?command=ls", None).expect("req");
        for (name, value) in [
            ("Connection", "Upgrade"),
            ("Upgrade", "websocket"),
            ("Authorization", "Bearer t"),
            ("Impersonate-User", "root"),
            ("X-Remote-User", "admin"),
            ("X-Remote-Group", "system:masters"),
            ("X-Forwarded-For", "10.9.9.9"),
            ("Host", "gateway"),
        ] {
            req.append_header(name, value).expect("header");
        }
        req
    }

    const ENDPOINT: &str = "10.0.0.1:443";

    fn forwarding(strip_credentials: bool) -> Forwarding {
        Forwarding {
            client_ip: Some(IpAddr::from([127, 0, 0, 1])),
            proto: "https",
            strip_credentials,
        }
    }

    #[test]
    fn remote_backends_get_no_identity_and_no_credentials() {
        let mut req = request();
        apply(&mut req, &forwarding(true), ENDPOINT).expect("apply");
        let get = |name: &str| req.headers.get(name).and_then(|v| v.to_str().ok());
        for hidden in [
            "authorization",
            "impersonate-user",
            "x-remote-user",
            "x-remote-group",
        ] {
            assert_eq!(get(hidden), None, "{hidden}");
        }
        assert_eq!(get("host"), Some("10.0.0.1:443"));
        assert_eq!(get("x-forwarded-for"), Some("10.9.9.9, 127.0.0.1"));
        assert_eq!(get("x-forwarded-proto"), Some("https"));
        assert_eq!(get("x-forwarded-host"), Some("10.0.0.1:443"));
        assert_eq!(get("x-forwarded-uri"), Some("/apis/a.io/v1/x/exec"));
        assert_eq!(get("upgrade"), Some("websocket"));
    }

    #[test]
    fn the_delegate_keeps_credentials_but_never_identity_claims() {
        let mut req = request();
        apply(&mut req, &forwarding(false), ENDPOINT).expect("apply");
        assert!(req.headers.contains_key("authorization"));
        assert!(req.headers.contains_key("impersonate-user"));
        assert!(!req.headers.contains_key("x-remote-user"));
    }

    #[test]
    fn the_upgrade_head_follows_the_same_policy() {
        let head =
            String::from_utf8(upgrade_head(&request(), &forwarding(true), ENDPOINT).expect("head"))
                .expect("utf8");
        assert!(head
            .starts_with("GET /apis/a.io/v1/x/exec?command=ls HTTP/1.1\r\nHost: 10.0.0.1:443\r\n"));
        let lower = head.to_ascii_lowercase();
        for hidden in [
            "authorization",
            "impersonate-",
            "x-remote-",
            "host: gateway",
        ] {
            assert!(!lower.contains(hidden), "{hidden} in {head}");
        }
        assert!(lower.contains("x-forwarded-for: 10.9.9.9, 127.0.0.1\r\n"));
        assert!(lower.contains("x-forwarded-proto: https\r\n"));
        assert_eq!(lower.matches("\r\nhost: ").count(), 1, "{head}");
        assert!(head.ends_with("\r\n\r\n"));
    }
}
