//! Structured authentication as kube-apiserver reads it (`--authentication-config`,
//! `AuthenticationConfiguration`, KEP-3331): the file's types and validation with upstream's
//! field paths, CEL claim rules and mappings compiled at load with a cost bound, and JWT
//! validation against an issuer's published keys. No I/O: the gateway fetches discovery
//! documents and key sets and hands their bytes here.

pub mod config;
pub mod expr;
pub mod jwt;
pub mod mapping;
pub mod validate;

pub use config::AuthenticationConfiguration;
pub use mapping::{Accepted, Identity, JwtAuthenticator, MappingError};
pub use validate::{load, Loaded, ValidationErrors};
