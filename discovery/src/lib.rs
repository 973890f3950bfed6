//! Kubernetes discovery documents: types, merge, negotiation and rendering (no I/O).
