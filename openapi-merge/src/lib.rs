//! OpenAPI v2 merge and v3 index building (no I/O).
