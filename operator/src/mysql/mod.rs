//! The MySQL/MariaDB adapter: what the operator asks a site, and how it reads
//! the answers of either flavour.
//!
//! - [`probe`] connects with the site's credentials, reads its role
//!   (`read_only`, on MySQL also `super_read_only`), `server_id`, GTID
//!   position and replication state, within one timeout.
//! - [`classify`] maps a connection or server error to a stable reason
//!   (`SiteUnreachable`, `AuthenticationFailed`, ...). Messages come from the
//!   server or the socket and never contain the password.
//! - [`gtid`] reads GTID positions of both flavours and answers "covered?"
//!   and "errant?"; [`statements`] holds the SQL of each failover step for
//!   each flavour (the failover engine itself is a later piece of work).

pub(crate) mod actions;
pub(crate) mod grants;
mod probe;
pub(crate) mod statements;

pub(crate) use bloodraven_core::observation::{Flavor, ReplicationObservation, SemiSync, SiteObservation};
pub(crate) use probe::{Credentials, ProbeError, ProbeTarget, classify, probe};
