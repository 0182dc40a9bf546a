//! The failover engine's pure parts: [`planned`], the decision table of a
//! planned failover (switchover), property-tested against a simulated pair
//! of sites. The engine that runs it against the MariaDB/MySQL sites
//! (`crate::mysql::statements`, `crate::mysql::gtid`) is the next piece of
//! work (issue 7).

pub mod planned;
