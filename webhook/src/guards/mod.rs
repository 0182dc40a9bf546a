//! The validating guards, as pure functions of the request's objects; the
//! endpoints ([`crate::review`]) add the user and the reads.

pub mod database;
pub mod group;
pub mod state;
