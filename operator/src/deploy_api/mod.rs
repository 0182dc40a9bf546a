//! The deploy API (`/deploy/v1`): a group-wide migration mutex and a
//! renewable failover-hold, stored as Kubernetes Leases and fenced by the
//! group's topology generation (lease seed, DESIGN.md "Deploy API").
//!
//! Status: the lease state machine is here and property-tested; storage,
//! the TLS server, authentication and the handlers come next (issue 3 is
//! open).

pub mod lease;
