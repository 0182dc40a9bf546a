//! What one probe of a site saw. Pure data and parsing, unit-tested.

use std::collections::HashMap;

/// Server flavour, from `@@version`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// MariaDB: `read_only` only (no `super_read_only`), `gtid_current_pos`,
    /// `SHOW SLAVE STATUS`.
    MariaDb,
    /// MySQL 8: `super_read_only`, `gtid_executed`, `SHOW REPLICA STATUS`.
    MySql,
}

impl Flavor {
    /// Flavour of a server by its `@@version` string.
    pub fn from_version(version: &str) -> Flavor {
        if version.to_ascii_lowercase().contains("mariadb") { Flavor::MariaDb } else { Flavor::MySql }
    }
}

/// One successful probe of a site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteObservation {
    /// Server flavour.
    pub flavor: Flavor,
    /// `@@version`.
    pub version: String,
    /// `@@server_id`.
    pub server_id: u32,
    /// `@@server_uuid` on MySQL, whose GTIDs it names; empty on MariaDB.
    pub server_uuid: String,
    /// Whether the server accepts writes from ordinary accounts.
    pub writable: bool,
    /// GTID position (`gtid_current_pos` / `gtid_executed`).
    pub gtid_position: String,
    /// Every GTID the server has binlogged, as errant transactions are
    /// judged by: MariaDB `gtid_binlog_state` (the last GTID of each
    /// domain and `server_id`; `log_slave_updates` makes a replica binlog
    /// what it applies), MySQL `gtid_executed`.
    pub gtid_binlog_state: String,
    /// What the server applied from a source: MariaDB `gtid_slave_pos`;
    /// empty on MySQL (`gtid_executed` holds everything).
    pub gtid_slave_pos: String,
    /// Replication state; `None` when no replication is configured.
    pub replication: Option<ReplicationObservation>,
    /// Semi-synchronous replication switches: MariaDB's built in
    /// `rpl_semi_sync_master_enabled`, `rpl_semi_sync_slave_enabled`;
    /// MySQL's `rpl_semi_sync_source_enabled`,
    /// `rpl_semi_sync_replica_enabled`. `None` when the site cannot do
    /// semi-sync (MySQL without both plugins loaded).
    pub semi_sync: Option<SemiSync>,
}

/// The semi-sync switches of a site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SemiSync {
    /// `rpl_semi_sync_master_enabled` (MySQL `…_source_enabled`): commits
    /// wait for a replica's acknowledgement.
    pub primary: bool,
    /// `rpl_semi_sync_slave_enabled` (MySQL `…_replica_enabled`): this
    /// replica acknowledges.
    pub replica: bool,
    /// `rpl_semi_sync_master_timeout` (MySQL `…_source_timeout`), in
    /// milliseconds: how long a commit waits before the server itself falls
    /// back to asynchronous replication.
    pub timeout_ms: u64,
    /// `rpl_semi_sync_master_wait_no_slave` (MySQL `…_source_wait_no_replica`):
    /// commits wait even while no replica is connected.
    pub wait_no_replica: bool,
    /// Commits waiting for a semi-sync acknowledgement now
    /// (`Rpl_semi_sync_master_wait_sessions`, MySQL `…_source_wait_sessions`),
    /// read only while the primary side is on; `None` when unread.
    pub waiting: Option<u32>,
}

/// The replica side of one replication channel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicationObservation {
    /// IO (receiver) thread running (`Yes`).
    pub io_running: bool,
    /// The IO thread's state as shown: `Yes`, `Connecting` (retrying a
    /// source that went away) or `No` (stopped: by a person, or an error).
    pub io_state: String,
    /// SQL (applier) thread running (`Yes`).
    pub sql_running: bool,
    /// `Seconds_Behind_Master`/`Seconds_Behind_Source`; `None` when NULL.
    pub lag_seconds: Option<u64>,
    /// `Master_Server_Id`/`Source_Server_Id`; `None` or 0 before first connect.
    pub source_server_id: Option<u32>,
    /// `Master_Host`/`Source_Host`.
    pub source_host: String,
    /// `Master_Port`/`Source_Port`.
    pub source_port: u16,
    /// The last IO or SQL error text, if any.
    pub last_error: Option<String>,
    /// What the replica has received from its source: MariaDB
    /// `Gtid_IO_Pos`, MySQL `Retrieved_Gtid_Set`; `None` when not shown.
    pub received_position: Option<String>,
    /// Heartbeats the receiver got from its source since its channel
    /// started (MariaDB status `Slave_received_heartbeats`, MySQL
    /// `replication_connection_status.COUNT_RECEIVED_HEARTBEATS`); a source
    /// sends one whenever its binlog was idle for a heartbeat period, so
    /// with the received position it shows the source alive to the replica.
    /// `None` when not read.
    pub heartbeats: Option<u64>,
    /// The heartbeat period the receiver asked for, in milliseconds
    /// (`MASTER_HEARTBEAT_PERIOD` / `SOURCE_HEARTBEAT_PERIOD`; 0: off).
    pub heartbeat_period_ms: Option<u64>,
    /// Not the server's word but the operator's: why this replica is
    /// stalled (behind the active site by GTID, with nothing received or
    /// applied for the stall bound), set by the round's replica check.
    pub stall: Option<String>,
}

impl ReplicationObservation {
    /// Both threads run, and the operator did not find it stalled.
    pub fn running(&self) -> bool {
        self.io_running && self.sql_running && self.stall.is_none()
    }

    /// Reads a `SHOW SLAVE STATUS` / `SHOW REPLICA STATUS` row given as
    /// column name → text (NULL as absent). Accepts both vocabularies.
    pub fn from_columns(cols: &HashMap<String, String>) -> ReplicationObservation {
        let get = |old: &str, new: &str| cols.get(old).or_else(|| cols.get(new)).map(String::as_str);
        let yes = |v: Option<&str>| v.is_some_and(|v| v.eq_ignore_ascii_case("yes"));
        let errors: Vec<&str> = [get("Last_IO_Error", "Last_IO_Error"), get("Last_SQL_Error", "Last_SQL_Error")]
            .into_iter()
            .flatten()
            .filter(|e| !e.is_empty())
            .collect();
        ReplicationObservation {
            io_running: yes(get("Slave_IO_Running", "Replica_IO_Running")),
            io_state: get("Slave_IO_Running", "Replica_IO_Running").unwrap_or("No").to_owned(),
            sql_running: yes(get("Slave_SQL_Running", "Replica_SQL_Running")),
            lag_seconds: get("Seconds_Behind_Master", "Seconds_Behind_Source").and_then(|v| v.parse().ok()),
            source_server_id: get("Master_Server_Id", "Source_Server_Id")
                .and_then(|v| v.parse().ok())
                .filter(|id| *id != 0),
            source_host: get("Master_Host", "Source_Host").unwrap_or_default().to_owned(),
            source_port: get("Master_Port", "Source_Port").and_then(|v| v.parse().ok()).unwrap_or(0),
            last_error: if errors.is_empty() { None } else { Some(errors.join("; ")) },
            received_position: get("Gtid_IO_Pos", "Retrieved_Gtid_Set").map(|p| p.replace('\n', "")),
            heartbeats: None,
            heartbeat_period_ms: None,
            stall: None,
        }
    }
}

/// How a person makes a site a replica, in words for a message: the
/// statement's shape, in the flavor's own syntax.
pub fn replicate_hint(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::MariaDb => "CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos; START SLAVE",
        Flavor::MySql => "CHANGE REPLICATION SOURCE TO ... SOURCE_AUTO_POSITION=1; START REPLICA",
    }
}

/// How a person starts a stopped replica, for a message.
pub fn start_hint(flavor: Flavor) -> &'static str {
    match flavor {
        Flavor::MariaDb => "START SLAVE",
        Flavor::MySql => "START REPLICA",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn flavor_from_version() {
        assert_eq!(Flavor::from_version("10.11.14-MariaDB-0+deb12u2-log"), Flavor::MariaDb);
        assert_eq!(Flavor::from_version("8.0.36"), Flavor::MySql);
        assert_eq!(Flavor::from_version("8.4.0-commercial"), Flavor::MySql);
    }

    #[test]
    fn reads_mariadb_slave_status() {
        let r = ReplicationObservation::from_columns(&cols(&[
            ("Slave_IO_Running", "Yes"),
            ("Slave_SQL_Running", "Yes"),
            ("Seconds_Behind_Master", "3"),
            ("Master_Server_Id", "1"),
            ("Master_Host", "127.0.0.1"),
            ("Master_Port", "3306"),
            ("Last_IO_Error", ""),
            ("Last_SQL_Error", ""),
        ]));
        assert!(r.running());
        assert_eq!(r.lag_seconds, Some(3));
        assert_eq!(r.source_server_id, Some(1));
        assert_eq!(r.source_port, 3306);
        assert_eq!(r.last_error, None);
    }

    #[test]
    fn reads_mysql_replica_status_with_stopped_applier() {
        let r = ReplicationObservation::from_columns(&cols(&[
            ("Replica_IO_Running", "Yes"),
            ("Replica_SQL_Running", "No"),
            ("Source_Server_Id", "7"),
            ("Last_SQL_Error", "Error 'Duplicate entry'"),
        ]));
        assert!(!r.running());
        assert_eq!(r.lag_seconds, None, "NULL lag stays unknown");
        assert_eq!(r.source_server_id, Some(7));
        assert_eq!(r.last_error.as_deref(), Some("Error 'Duplicate entry'"));
    }

    #[test]
    fn connecting_io_thread_is_not_running_and_zero_source_id_is_unknown() {
        let r = ReplicationObservation::from_columns(&cols(&[
            ("Slave_IO_Running", "Connecting"),
            ("Slave_SQL_Running", "Yes"),
            ("Master_Server_Id", "0"),
        ]));
        assert!(!r.io_running);
        assert_eq!(r.source_server_id, None);
    }
}
