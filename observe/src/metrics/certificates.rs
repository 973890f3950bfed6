//! Expiry of the certificates apiagg loads: `apiagg_certificate_expiration_timestamp_seconds`.

use super::Metrics;

/// The certificates apiagg loads, as the `certificate` label names them (a closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CertificateKind {
    /// The serving certificates (the default pair and the SNI pairs, with their chains).
    Serving,
    /// `authentication.clientCAFile`.
    ClientCa,
    /// `authentication.requestHeader.clientCAFile` (the front proxy's CA).
    RequestHeaderCa,
    /// `proxyClient`: the certificate apiagg presents to remote backends.
    ProxyClient,
    /// The client certificate apiagg presents to the delegate.
    DelegateClient,
    /// The CA apiagg verifies the delegate with.
    DelegateCa,
    /// The `spec.caBundle`s of the remote APIServices.
    BackendCa,
}

impl CertificateKind {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CertificateKind::Serving => "serving",
            CertificateKind::ClientCa => "client-ca",
            CertificateKind::RequestHeaderCa => "requestheader-ca",
            CertificateKind::ProxyClient => "proxy-client",
            CertificateKind::DelegateClient => "delegate-client",
            CertificateKind::DelegateCa => "delegate-ca",
            CertificateKind::BackendCa => "backend-ca",
        }
    }
}

impl Metrics {
    /// Records the earliest `notAfter` (Unix seconds) among the certificates of `kind` in use;
    /// `None` drops the series (none of that kind is configured, or none could be read).
    pub fn certificate_expiry(&self, kind: CertificateKind, not_after: Option<i64>) {
        let label = [kind.as_str()];
        match not_after {
            Some(seconds) => self
                .certificate_expiration
                .with_label_values(&label)
                .set(seconds),
            None => {
                let _ = self.certificate_expiration.remove_label_values(&label);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(metrics: &Metrics) -> String {
        String::from_utf8(metrics.render()).expect("utf-8")
    }

    #[test]
    fn expiry_is_set_per_kind_and_dropped_when_gone() {
        let metrics = Metrics::new().expect("metrics");
        metrics.certificate_expiry(CertificateKind::Serving, Some(1_900_000_000));
        metrics.certificate_expiry(CertificateKind::BackendCa, Some(1_800_000_000));
        let text = scrape(&metrics);
        assert!(
            text.contains(
                "apiagg_certificate_expiration_timestamp_seconds{certificate=\"serving\"} 1900000000"
            ),
            "{text}"
        );
        assert!(
            text.contains("{certificate=\"backend-ca\"} 1800000000"),
            "{text}"
        );
        metrics.certificate_expiry(CertificateKind::BackendCa, None);
        assert!(!scrape(&metrics).contains("{certificate=\"backend-ca\"}"));
    }

    #[test]
    fn label_values_are_distinct() {
        use CertificateKind::*;
        let all = [
            Serving,
            ClientCa,
            RequestHeaderCa,
            ProxyClient,
            DelegateClient,
            DelegateCa,
            BackendCa,
        ];
        let mut labels: Vec<_> = all.iter().map(|k| k.as_str()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), all.len());
    }
}
