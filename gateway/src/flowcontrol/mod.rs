//! Layer 2: API Priority and Fairness (`flowcontrol.apiserver.k8s.io/v1`) and per-APIService
//! concurrency caps: which FlowSchema and priority level a request belongs to, and whether it
//! runs now, waits in a fair queue, or is rejected.
