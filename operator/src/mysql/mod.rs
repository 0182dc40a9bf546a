//! The MySQL/MariaDB adapter: what the operator asks a site, and how it reads
//! the answers of either flavour.
//!
//! - [`probe`] connects with the site's credentials, reads its role
//!   (`read_only`, on MySQL also `super_read_only`), `server_id`, GTID
//!   position and replication state, within one timeout.
//! - [`classify`] maps a connection or server error to a stable reason
//!   (`SiteUnreachable`, `AuthenticationFailed`, ...). Messages come from the
//!   server or the socket and never contain the password.
//! - [`actions`] carries out each step of a failover on a site (fence,
//!   catch up, promote, repoint, unfence), with the SQL of each step for
//!   each flavour in [`statements`]; [`grants`] lists the accounts that can
//!   write through `read_only`. GTID arithmetic is a rule, in
//!   `bloodraven_core::gtid`; the engines that use all this are in
//!   `crate::failover`.

pub(crate) mod actions;
pub(crate) mod grants;
mod probe;
pub(crate) mod statements;

pub(crate) use bloodraven_core::observation::{Flavor, ReplicationObservation, SemiSync, SiteObservation};
pub(crate) use probe::{Credentials, ProbeError, ProbeTarget, classify, probe};
