//! APIService model and gateway configuration.
