//! Backend endpoint URLs (`http(s)://host[:port]`), as the `services` table and the delegate
//! name them.

/// One backend endpoint, parsed from its URL.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// The URL as configured.
    pub url: String,
    /// `https` endpoint.
    pub tls: bool,
    /// Host name or IP literal (without brackets).
    pub host: String,
    /// Port (scheme default when omitted).
    pub port: u16,
}

/// Why an endpoint URL cannot be used. None is retryable: the configuration (or the Service it
/// was resolved from) must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// Not a URL. Not retryable.
    #[error("endpoint {url:?}: {source}")]
    Url {
        /// The URL as configured.
        url: String,
        /// Why it does not parse.
        source: url::ParseError,
    },
    /// A scheme other than `http` and `https`. Not retryable.
    #[error("endpoint {url:?}: scheme {scheme:?} is not supported, use http or https")]
    Scheme {
        /// The URL as configured.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// No host. Not retryable.
    #[error("endpoint {0:?}: host is missing")]
    NoHost(String),
    /// A path other than `/`, or a query. Not retryable.
    #[error("endpoint {0:?}: must not have a path or query")]
    PathOrQuery(String),
    /// No port and none known for the scheme. Not retryable.
    #[error("endpoint {0:?}: port is missing")]
    NoPort(String),
}

/// The result of parsing an endpoint.
type Result<T, E = EndpointError> = std::result::Result<T, E>;

/// Parses an endpoint URL (`http(s)://host[:port]`, no path).
pub fn parse_endpoint(text: &str) -> Result<Endpoint> {
    let url = url::Url::parse(text).map_err(|source| EndpointError::Url {
        url: text.to_string(),
        source,
    })?;
    let tls = match url.scheme() {
        "https" => true,
        "http" => false,
        other => {
            return Err(EndpointError::Scheme {
                url: text.to_string(),
                scheme: other.to_string(),
            })
        }
    };
    let host = match url.host() {
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        Some(h) => h.to_string(),
        None => return Err(EndpointError::NoHost(text.to_string())),
    };
    if !matches!(url.path(), "" | "/") || url.query().is_some() {
        return Err(EndpointError::PathOrQuery(text.to_string()));
    }
    let port = url
        .port_or_known_default()
        .ok_or_else(|| EndpointError::NoPort(text.to_string()))?;
    Ok(Endpoint {
        url: text.to_string(),
        tls,
        host,
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_hosts_and_default_ports() {
        let e = parse_endpoint("https://127.0.0.1:9443").expect("parses");
        assert_eq!((e.tls, e.host.as_str(), e.port), (true, "127.0.0.1", 9443));
        let e = parse_endpoint("http://[::1]/").expect("parses");
        assert_eq!((e.tls, e.host.as_str(), e.port), (false, "::1", 80));
        assert_eq!(parse_endpoint("https://a.example").map(|e| e.port), Ok(443));
    }

    #[test]
    fn unusable_urls_say_why() {
        let err = |url: &str| parse_endpoint(url).expect_err(url).to_string();
        assert!(err("not a url").starts_with("endpoint \"not a url\": "));
        assert_eq!(
            err("ftp://x"),
            "endpoint \"ftp://x\": scheme \"ftp\" is not supported, use http or https"
        );
        assert_eq!(
            err("https://x/api"),
            "endpoint \"https://x/api\": must not have a path or query"
        );
        assert!(matches!(
            parse_endpoint("https://x/?a=1"),
            Err(EndpointError::PathOrQuery(_))
        ));
    }
}
