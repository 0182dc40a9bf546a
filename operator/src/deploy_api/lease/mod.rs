//! Deploy leases: the pure state machine (`machine`) and its storage on
//! `coordination.k8s.io/v1` Lease objects (`store`, next).

pub mod machine;
pub mod store;
