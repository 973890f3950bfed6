//! Availability series of APIServices and their endpoints.

use super::{Metrics, REASONS};

impl Metrics {
    /// Drops every availability series of a deleted APIService.
    pub fn forget_apiservice<'a>(&self, name: &str, endpoints: impl IntoIterator<Item = &'a str>) {
        let _ = self.unavailable.remove_label_values(&[name]);
        for reason in REASONS {
            let _ = self.unavailable_total.remove_label_values(&[name, reason]);
        }
        for url in endpoints {
            self.forget_endpoint(name, url);
        }
    }

    /// Drops the series of an endpoint the APIService no longer has.
    pub fn forget_endpoint(&self, name: &str, url: &str) {
        let _ = self.endpoint_healthy.remove_label_values(&[name, url]);
    }
}
