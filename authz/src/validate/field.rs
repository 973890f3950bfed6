//! Go's `field.Error` texts and the string checks of `k8s.io/apimachinery/pkg/util/validation`
//! are `apiagg-authn`'s: one home for both configuration files.

pub(crate) use apiagg_authn::validate::field::{dns1123_subdomain, quote, Errors};
