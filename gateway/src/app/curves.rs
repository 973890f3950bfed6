//! `--tls-curve-preferences`, as kube-apiserver 1.37 names it
//! (`k8s.io/apiserver/pkg/server/options/serving.go`): a comma-separated list of numeric TLS
//! group IDs (Go's `crypto/tls` `CurveID` values: 23 P-256, 24 P-384, 25 P-521, 29 X25519,
//! 4588 X25519MLKEM768), the key exchanges the listener accepts. As upstream, the order of the
//! list is ignored: the groups are offered in the crypto provider's order of preference, with
//! X25519MLKEM768 first where the provider has it. A value out of range, repeated, or that the
//! provider cannot do is a start-up error naming the flag and the allowed values.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::NamedGroup;

/// The flag, for messages.
const FLAG: &str = "--tls-curve-preferences";

/// Why `--tls-curve-preferences` cannot be used. None is retryable: the command line must
/// change.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CurveError {
    /// Not a number (upstream takes numeric IDs only).
    #[error("invalid {FLAG} value {0:?}: not a numeric TLS group ID; allowed values: {allowed}", allowed = allowed())]
    NotANumber(String),
    /// Outside 1–65535 (upstream's words).
    #[error("invalid {FLAG} value: curve preference {0} is out of range (must be 1-65535); allowed values: {allowed}", allowed = allowed())]
    OutOfRange(i64),
    /// Named twice (upstream's words).
    #[error("invalid {FLAG} value: duplicate curve preference {0}")]
    Duplicate(u16),
    /// A group this build's crypto provider cannot do (upstream: "not supported by the current
    /// Go version").
    #[error("invalid {FLAG} value: curve preference {id}{name} is not supported by this build's TLS crypto provider; allowed values: {allowed}", name = known_name(*id).map(|n| format!(" ({n})")).unwrap_or_default(), allowed = allowed())]
    Unsupported {
        /// The group ID.
        id: u16,
    },
}

/// The provider the listener is built with (pingora's default, ring).
fn base() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// Go's name of a group ID upstream knows.
fn known_name(id: u16) -> Option<&'static str> {
    Some(match id {
        23 => "CurveP256",
        24 => "CurveP384",
        25 => "CurveP521",
        29 => "X25519",
        4587 => "SecP256r1MLKEM768",
        4588 => "X25519MLKEM768",
        4589 => "SecP384r1MLKEM1024",
        _ => return None,
    })
}

/// The IDs the provider can do, with their names: `23 (CurveP256), 29 (X25519), …`.
pub fn allowed() -> String {
    base()
        .kx_groups
        .iter()
        .map(|g| {
            let id = u16::from(g.name());
            match known_name(id) {
                Some(name) => format!("{id} ({name})"),
                None => id.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One value of the flag (clap's parser: the error names the flag and the allowed values).
pub fn curve_id(value: &str) -> Result<u16, CurveError> {
    let id: i64 = value
        .trim()
        .parse()
        .map_err(|_| CurveError::NotANumber(value.to_string()))?;
    let id = u16::try_from(id)
        .ok()
        .filter(|&id| id != 0)
        .ok_or(CurveError::OutOfRange(id))?;
    if base().kx_groups.iter().any(|g| u16::from(g.name()) == id) {
        Ok(id)
    } else {
        Err(CurveError::Unsupported { id })
    }
}

/// The listener's crypto provider for `ids` (`None`: the default, unchanged): only those
/// groups, in the provider's order with X25519MLKEM768 first.
pub fn provider(ids: &[u16]) -> Result<Option<Arc<CryptoProvider>>, CurveError> {
    if ids.is_empty() {
        return Ok(None);
    }
    for (at, id) in ids.iter().enumerate() {
        if ids[..at].contains(id) {
            return Err(CurveError::Duplicate(*id));
        }
        curve_id(&id.to_string())?;
    }
    let mut provider = base();
    provider
        .kx_groups
        .retain(|g| ids.contains(&u16::from(g.name())));
    // A stable sort: the hybrid post-quantum group first, the rest in the provider's order.
    provider
        .kx_groups
        .sort_by_key(|g| g.name() != NamedGroup::X25519MLKEM768);
    Ok(Some(Arc::new(provider)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(ids: &[u16]) -> Vec<u16> {
        let provider = provider(ids).ok().flatten().expect("a provider");
        provider
            .kx_groups
            .iter()
            .map(|g| u16::from(g.name()))
            .collect()
    }

    #[test]
    fn values_are_upstreams_numeric_ids() {
        assert_eq!(curve_id("29"), Ok(29));
        assert_eq!(curve_id(" 23"), Ok(23));
        assert_eq!(curve_id("0"), Err(CurveError::OutOfRange(0)));
        assert_eq!(curve_id("-1"), Err(CurveError::OutOfRange(-1)));
        assert_eq!(curve_id("65536"), Err(CurveError::OutOfRange(65536)));
        assert_eq!(
            curve_id("65535"),
            Err(CurveError::Unsupported { id: 65535 })
        );
        assert_eq!(
            curve_id("X25519"),
            Err(CurveError::NotANumber("X25519".into()))
        );
    }

    #[test]
    fn errors_name_the_flag_and_the_allowed_values() {
        for value in ["X25519", "0", "65535"] {
            let m = curve_id(value).expect_err(value).to_string();
            assert!(m.contains("--tls-curve-preferences"), "{m}");
            assert!(m.contains("29 (X25519)"), "{m}");
            assert!(m.contains("23 (CurveP256)"), "{m}");
        }
        let unknown = CurveError::Unsupported { id: 25 }.to_string();
        assert!(unknown.contains("25 (CurveP521)"), "{unknown}");
        assert_eq!(
            provider(&[23, 23]).err(),
            Some(CurveError::Duplicate(23)),
            "duplicates"
        );
    }

    #[test]
    fn the_order_given_is_ignored_and_x25519mlkem768_leads_where_it_exists() {
        assert_eq!(provider(&[]).ok().flatten().map(|_| ()), None);
        // ring: X25519, P-256, P-384 in that order, whatever order the flag names them in.
        assert_eq!(names(&[24, 29]), [29, 24]);
        assert_eq!(names(&[23]), [23]);
        let has_hybrid = base()
            .kx_groups
            .iter()
            .any(|g| g.name() == NamedGroup::X25519MLKEM768);
        match provider(&[4588, 29]) {
            Ok(Some(p)) => {
                assert!(has_hybrid);
                assert_eq!(p.kx_groups[0].name(), NamedGroup::X25519MLKEM768);
            }
            Err(e) => {
                assert!(!has_hybrid, "{e}");
                assert_eq!(e, CurveError::Unsupported { id: 4588 });
                assert!(e.to_string().contains("4588 (X25519MLKEM768)"), "{e}");
            }
            Ok(None) => panic!("a list names groups"),
        }
    }
}
