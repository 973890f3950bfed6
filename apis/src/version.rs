//! Kube-aware version ordering (k8s.io/apimachinery's `pkg/version/helpers.go`).
//!
//! A version is "kube-like" when it reads `v<major>[(alpha|beta)<minor>]` with numbers that fit an
//! `i32`. Kube-like versions sort before all others; among them GA beats beta beats alpha, then the
//! higher major, then the higher minor. Other strings sort byte-wise ascending.

use std::cmp::Ordering;

/// Stability class of a kube-like version; the derived order puts the most stable last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stability {
    Alpha,
    Beta,
    Ga,
}

/// A parsed kube-like version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KubeVersion {
    stability: Stability,
    major: i32,
    minor: i32,
}

fn parse_number(digits: &str) -> Option<i32> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn parse(version: &str) -> Option<KubeVersion> {
    let rest = version.strip_prefix('v')?;
    let split = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let major = parse_number(&rest[..split])?;
    let tail = &rest[split..];
    if tail.is_empty() {
        return Some(KubeVersion {
            stability: Stability::Ga,
            major,
            minor: 0,
        });
    }
    let (stability, minor) = if let Some(n) = tail.strip_prefix("alpha") {
        (Stability::Alpha, n)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (Stability::Beta, n)
    } else {
        return None;
    };
    Some(KubeVersion {
        stability,
        major,
        minor: parse_number(minor)?,
    })
}

/// Legacy discovery order of APIServices (kube-aggregator's
/// `pkg/apis/apiregistration/v1/helper/helpers.go`): `groupPriorityMinimum` descending, then
/// APIService name; arguments are `(groupPriorityMinimum, name)`.
pub fn compare_apiservices(a: (i32, &str), b: (i32, &str)) -> Ordering {
    b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1))
}

/// Order of the versions of one group: `versionPriority` descending, then kube-aware version
/// order; arguments are `(version, versionPriority)`.
pub fn compare_versions(a: (&str, i32), b: (&str, i32)) -> Ordering {
    b.1.cmp(&a.1).then_with(|| compare_kube_aware(a.0, b.0))
}

/// Compares two versions the way Kubernetes orders them for display: `Ordering::Less` means `a`
/// comes first. `v10, v2, v1, v11beta2, v10beta3, v3beta1, v12alpha1, v11alpha2, foo1, foo10`.
pub fn compare_kube_aware(a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    match (parse(a), parse(b)) {
        (None, None) => a.cmp(b),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (Some(x), Some(y)) => y
            .stability
            .cmp(&x.stability)
            .then(y.major.cmp(&x.major))
            .then(y.minor.cmp(&x.minor)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example_order() {
        let expected = [
            "v10",
            "v2",
            "v1",
            "v11beta2",
            "v10beta3",
            "v3beta1",
            "v12alpha1",
            "v11alpha2",
            "foo1",
            "foo10",
        ];
        let mut shuffled = expected.to_vec();
        shuffled.reverse();
        shuffled.swap(0, 4);
        shuffled.sort_by(|a, b| compare_kube_aware(a, b));
        assert_eq!(shuffled, expected);
    }

    #[test]
    fn class_beats_major() {
        assert_eq!(compare_kube_aware("v1beta1", "v2alpha1"), Ordering::Less);
        assert_eq!(compare_kube_aware("v1", "v2beta1"), Ordering::Less);
    }

    #[test]
    fn non_kube_like_strings() {
        let is_kube_like = |version: &str| parse(version).is_some();
        assert!(!is_kube_like("v1alpha"));
        assert!(!is_kube_like("foo1"));
        assert!(!is_kube_like("v"));
        assert!(!is_kube_like("v99999999999"));
        assert!(is_kube_like("v01"));
        assert_eq!(compare_kube_aware("foo10", "foo2"), Ordering::Less);
        assert_eq!(compare_kube_aware("v1alpha", "v1alpha1"), Ordering::Greater);
    }

    #[test]
    fn spec_edge_case_five() {
        let mut versions = vec![
            "foo2", "v1alpha1", "v2alpha1", "foo10", "v1beta1", "v1beta2", "v1",
        ];
        versions.sort_by(|a, b| compare_kube_aware(a, b));
        assert_eq!(
            versions,
            ["v1", "v1beta2", "v1beta1", "v2alpha1", "v1alpha1", "foo10", "foo2"]
        );
    }
}
