//! APIService model and gateway configuration.

pub mod version;
