//! Endpoint host names and their addresses, resolved before a route table is built. Building a
//! table only reads this map: a name is resolved by [`Names::resolve`] (the runtime's
//! resolver, on its blocking pool, bounded by a timeout), never by a call that blocks a runtime
//! worker. Addresses are sorted and deduplicated, so an unchanged answer builds identical
//! routes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use super::upstream::BuildError;

/// A host name and port to resolve (IP literals need no entry).
pub type HostPort = (String, u16);

/// What a resolution gave: the addresses, or why there are none.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Addresses(Arc<[SocketAddr]>),
    Failed(String),
}

/// Addresses of the host names endpoints use, as last resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    answers: BTreeMap<HostPort, Answer>,
}

impl Names {
    /// The addresses of `host:port`: an IP literal as it is, a name as last resolved. A name
    /// never resolved is an error (the next resolution round adds it).
    pub fn addresses(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, BuildError> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let authority = authority(host, port);
        match self.answers.get(&(host.to_string(), port)) {
            Some(Answer::Addresses(addrs)) if addrs.is_empty() => {
                Err(BuildError::NoAddress(authority))
            }
            Some(Answer::Addresses(addrs)) => Ok(addrs.to_vec()),
            Some(Answer::Failed(message)) => Err(BuildError::Resolve {
                authority,
                source: std::io::Error::other(message.clone()),
            }),
            None => Err(BuildError::Resolve {
                authority,
                source: std::io::Error::other("not resolved yet"),
            }),
        }
    }

    /// Whether every name of `wanted` has an answer.
    pub fn covers(&self, wanted: &BTreeSet<HostPort>) -> bool {
        wanted.iter().all(|key| self.answers.contains_key(key))
    }

    /// Resolves every name of `wanted` at once, each bounded by `timeout`.
    pub async fn resolve(wanted: &BTreeSet<HostPort>, timeout: Duration) -> Names {
        let lookups = wanted.iter().map(|(host, port)| async move {
            let answer = match tokio::time::timeout(
                timeout,
                tokio::net::lookup_host((host.as_str(), *port)),
            )
            .await
            {
                Ok(Ok(addrs)) => Answer::Addresses(sorted(addrs)),
                Ok(Err(e)) => Answer::Failed(e.to_string()),
                Err(_) => Answer::Failed(format!("no answer within {timeout:?}")),
            };
            ((host.clone(), *port), answer)
        });
        Names {
            answers: futures_util::future::join_all(lookups)
                .await
                .into_iter()
                .collect(),
        }
    }

    /// Resolves every name of `wanted` on the calling thread: only at start-up, before the
    /// runtime serves anything.
    pub fn resolve_now(wanted: &BTreeSet<HostPort>) -> Names {
        let answers = wanted
            .iter()
            .map(|(host, port)| {
                let answer = match (host.as_str(), *port).to_socket_addrs() {
                    Ok(addrs) => Answer::Addresses(sorted(addrs)),
                    Err(e) => Answer::Failed(e.to_string()),
                };
                ((host.clone(), *port), answer)
            })
            .collect();
        Names { answers }
    }
}

/// The names among `endpoints` (`(host, port)` pairs) that are not IP literals.
pub fn names_of<'a>(endpoints: impl IntoIterator<Item = (&'a str, u16)>) -> BTreeSet<HostPort> {
    endpoints
        .into_iter()
        .filter(|(host, _)| host.parse::<IpAddr>().is_err())
        .map(|(host, port)| (host.to_string(), port))
        .collect()
}

fn sorted(addrs: impl Iterator<Item = SocketAddr>) -> Arc<[SocketAddr]> {
    let mut addrs: Vec<SocketAddr> = addrs.collect();
    addrs.sort();
    addrs.dedup();
    addrs.into()
}

/// `host:port`, bracketed for IPv6.
pub(super) fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_need_no_resolution_and_unknown_names_are_errors() {
        let names = Names::default();
        let addrs = names.addresses("127.0.0.1", 443).expect("literal");
        assert_eq!(addrs, vec!["127.0.0.1:443".parse().expect("addr")]);
        let v6 = names.addresses("::1", 443).expect("literal");
        assert_eq!(v6, vec!["[::1]:443".parse().expect("addr")]);
        let error = names.addresses("api.example", 443).expect_err("unknown");
        assert!(error.to_string().contains("not resolved yet"), "{error}");
        let wanted = names_of([("127.0.0.1", 1), ("api.example", 443), ("::1", 2)]);
        assert_eq!(wanted, BTreeSet::from([("api.example".to_string(), 443)]));
        assert!(!names.covers(&wanted));
    }

    #[tokio::test]
    async fn names_resolve_sorted_and_failures_keep_their_reason() {
        let wanted = BTreeSet::from([
            ("localhost".to_string(), 8443),
            ("no-such-host.invalid".to_string(), 443),
        ]);
        let names = Names::resolve(&wanted, Duration::from_secs(10)).await;
        assert!(names.covers(&wanted));
        let local = names.addresses("localhost", 8443).expect("localhost");
        assert!(local
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 8443));
        let mut sorted = local.clone();
        sorted.sort();
        assert_eq!(local, sorted);
        let error = names
            .addresses("no-such-host.invalid", 443)
            .expect_err("invalid TLD");
        assert!(
            error.to_string().contains("no-such-host.invalid:443"),
            "{error}"
        );
        assert_eq!(Names::resolve_now(&wanted), names);
    }
}
