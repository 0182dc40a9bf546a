//! The deploy-lease domain's pure part: [`machine`], the state machine over
//! one group's two slots and its tombstones. Its storage on Lease objects and
//! the interface the deploy API and the reconcilers use live in the
//! operator (`lease::store`, `lease::service`).

pub mod machine;
