//! The metrics kube-apiserver has for authentication, with its names and labels: attempts and
//! their duration per request, reloads of the structured authentication file, key set fetches
//! per issuer, and each JWT authenticator's latency.
//! `jwt_issuer_hash` is `sha256:<hex>` of the issuer URL, a closed set (the configured
//! issuers); an issuer's series go when a reload removes it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus::{
    GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry,
};

/// The outcome of authenticating one request, as kube-apiserver labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// An authenticator accepted the request (anonymous included).
    Success = 0,
    /// None did.
    Failure = 1,
    /// An authenticator could not decide (the TokenReview budget was spent).
    Error = 2,
}

/// Authentication's metrics (cheap to clone).
#[derive(Clone)]
pub struct AuthnMetrics {
    /// `authentication_attempts{result}`: `success`, `failure`, `error`, resolved.
    attempts: [IntCounter; 3],
    /// `authentication_duration_seconds{result}`, resolved.
    durations: [Histogram; 3],
    reloads: IntCounterVec,
    reload_last: GaugeVec,
    fetch_last: GaugeVec,
    keyset_hash: GaugeVec,
    latency: HistogramVec,
}

impl AuthnMetrics {
    /// Registers them.
    pub fn register(registry: &Registry) -> prometheus::Result<AuthnMetrics> {
        let counter = |name, help, labels: &[&str]| -> prometheus::Result<IntCounterVec> {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let gauge = |name, help, labels: &[&str]| -> prometheus::Result<GaugeVec> {
            let g = GaugeVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "apiserver_authentication_jwt_authenticator_latency_seconds",
                "Latency of jwt authentication operations in seconds. This is the time spent authenticating a token for cache miss only (i.e. when the token is not found in the cache).",
            )
            .buckets(vec![0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
            &["jwt_issuer_hash", "result"],
        )?;
        registry.register(Box::new(latency.clone()))?;
        let attempts = counter(
            "authentication_attempts",
            "Counter of authenticated attempts.",
            &["result"],
        )?;
        let durations = HistogramVec::new(
            HistogramOpts::new(
                "authentication_duration_seconds",
                "Authentication duration in seconds broken out by result.",
            )
            .buckets(prometheus::exponential_buckets(0.001, 2.0, 15)?),
            &["result"],
        )?;
        registry.register(Box::new(durations.clone()))?;
        let results = ["success", "failure", "error"];
        Ok(AuthnMetrics {
            attempts: results.map(|r| attempts.with_label_values(&[r])),
            durations: results.map(|r| durations.with_label_values(&[r])),
            reloads: counter(
                "apiserver_authentication_config_controller_automatic_reloads_total",
                "Total number of automatic reloads of authentication configuration split by status and apiserver identity.",
                &["status"],
            )?,
            reload_last: gauge(
                "apiserver_authentication_config_controller_automatic_reload_last_timestamp_seconds",
                "Timestamp of the last automatic reload of authentication configuration split by status and apiserver identity.",
                &["status"],
            )?,
            fetch_last: gauge(
                "apiserver_authentication_jwks_fetch_last_timestamp_seconds",
                "Timestamp of the last successful or failed JWKS fetch split by result, api server identity and jwt issuer for the JWT authenticator.",
                &["jwt_issuer_hash", "status"],
            )?,
            keyset_hash: gauge(
                "apiserver_authentication_jwks_fetch_last_keyset_hash",
                "Hash of the last JWKS fetched by the JWT authenticator split by api server identity and jwt issuer.",
                &["jwt_issuer_hash"],
            )?,
            latency,
        })
    }

    /// One request authenticated (or not), and how long it took.
    pub fn attempt(&self, result: Attempt, took: Duration) {
        self.attempts[result as usize].inc();
        self.durations[result as usize].observe(took.as_secs_f64());
    }

    /// A reload of the file: `success` or `failure`.
    pub fn reloaded(&self, ok: bool) {
        let status = if ok { "success" } else { "failure" };
        self.reloads.with_label_values(&[status]).inc();
        self.reload_last.with_label_values(&[status]).set(now());
    }

    /// A key set fetch; on success the set's hash (its first 8 bytes, as a number).
    pub fn fetched(&self, issuer: &str, ok: bool, hash: Option<[u8; 32]>) {
        let status = if ok { "success" } else { "failure" };
        self.fetch_last
            .with_label_values(&[issuer, status])
            .set(now());
        if let Some(hash) = hash {
            let mut first = [0u8; 8];
            first.copy_from_slice(&hash[..8]);
            self.keyset_hash
                .with_label_values(&[issuer])
                .set(u64::from_be_bytes(first) as f64);
        }
    }

    /// One token validated (not from the cache): `success` or `failure`.
    pub fn latency(&self, issuer: &str, result: &str, took: Duration) {
        self.latency
            .with_label_values(&[issuer, result])
            .observe(took.as_secs_f64());
    }

    /// Drops an issuer's series (a reload removed it).
    pub fn forget(&self, issuer: &str) {
        for status in ["success", "failure"] {
            let _ = self.fetch_last.remove_label_values(&[issuer, status]);
            let _ = self.latency.remove_label_values(&[issuer, status]);
        }
        let _ = self.keyset_hash.remove_label_values(&[issuer]);
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}
