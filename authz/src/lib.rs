//! Structured authorization as kube-apiserver reads it (`--authorization-config`,
//! `AuthorizationConfiguration`, KEP-3221): the file's types and validation with upstream's
//! field paths, CEL match conditions over the SubjectAccessReview compiled at load, the
//! attributes of a request and the review that carries them (with selectors, KEP-4601), and
//! RBAC decided from the cluster's Roles and bindings. No I/O: the gateway follows the cluster's
//! objects and asks webhooks, and hands what it learns here.

pub mod attributes;
pub mod config;
pub mod matching;
pub mod rbac;
pub mod request;
pub mod review;
pub mod validate;

pub use attributes::{Attributes, Decision, Operator, Requirement, Subject};
