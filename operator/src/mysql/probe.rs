//! One probe of one site, over a fresh connection: a probe measures whether
//! a new client can reach the site and what role it has, which a pooled,
//! long-lived connection would hide.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use bloodraven_api::v1alpha1::reason;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Row, Value};

use bloodraven_core::observation::{Flavor, ReplicationObservation, SemiSync, SiteObservation};

/// Where a site listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProbeTarget {
    /// Host name or IP address.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

/// The operator's account on a site, read from the site's Secret.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    /// Account name.
    pub username: String,
    /// Password. Never logged: `Debug` prints it redacted.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials").field("username", &self.username).field("password", &"<redacted>").finish()
    }
}

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProbeError {
    /// No complete answer within the probe timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The client library failed (connect, I/O, TLS, protocol, or a server error).
    #[error("{0}")]
    Mysql(#[from] mysql_async::Error),
    /// The server answered something the probe cannot read.
    #[error("unexpected answer: {0}")]
    Unexpected(String),
    /// The server is a version the operator does not drive (the reason).
    #[error("{0}")]
    Unsupported(String),
    /// The server still waited on what its sessions hold when the
    /// operator's bound ran out (what it waited for).
    #[error("{0}")]
    Waited(String),
}

/// Longest text of a server or socket error kept in a message: the site
/// (or anything answering on its port) chooses that text, and it reaches
/// status, Events (whose notes hold at most 1024 characters) and logs.
const MAX_ERROR_TEXT: usize = 160;

/// Maps a probe failure to a stable reason and a message that says what to
/// fix; text that comes from the server or the socket is escaped and bounded.
pub(crate) fn classify(err: &ProbeError) -> (&'static str, String) {
    let (reason, message) = classify_raw(err);
    (reason, bloodraven_serving::log::escape(&message, MAX_ERROR_TEXT))
}

fn classify_raw(err: &ProbeError) -> (&'static str, String) {
    match err {
        ProbeError::Timeout(d) => (reason::SITE_UNREACHABLE, format!("no answer within {}s", d.as_secs_f32())),
        ProbeError::Mysql(mysql_async::Error::Server(s)) => match s.code {
            // ER_ACCESS_DENIED_ERROR: wrong user or password.
            1045 => (
                reason::AUTHENTICATION_FAILED,
                format!(
                    "the site refused the credentials (server error {}): {}; check the credentials Secret",
                    s.code, s.message
                ),
            ),
            // ER_DBACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR, ER_SPECIFIC_ACCESS_DENIED_ERROR, ER_PROCACCESS_DENIED_ERROR
            1044 | 1142 | 1227 | 1370 => (
                reason::INSUFFICIENT_PRIVILEGES,
                format!("the operator's account lacks a privilege (server error {}): {}", s.code, s.message),
            ),
            _ => (reason::PROBE_FAILED, format!("server error {}: {}", s.code, s.message)),
        },
        // The innermost I/O error says it all ("Connection refused (os error 111)").
        ProbeError::Mysql(mysql_async::Error::Io(mysql_async::IoError::Io(e))) => {
            (reason::SITE_UNREACHABLE, format!("failed to connect: {e}"))
        }
        ProbeError::Mysql(e @ (mysql_async::Error::Io(_) | mysql_async::Error::Driver(_))) => {
            (reason::SITE_UNREACHABLE, format!("failed to connect: {e}"))
        }
        ProbeError::Mysql(e) => (reason::PROBE_FAILED, format!("{e}")),
        ProbeError::Unexpected(m) => (reason::PROBE_FAILED, format!("unexpected answer: {m}")),
        ProbeError::Unsupported(m) => (reason::UNSUPPORTED_SERVER_VERSION, m.clone()),
        ProbeError::Waited(m) => (reason::PROBE_FAILED, m.clone()),
    }
}

/// Probes a site within `timeout` (connect and every query).
pub(crate) async fn probe(
    target: &ProbeTarget,
    creds: &Credentials,
    timeout: Duration,
) -> Result<SiteObservation, ProbeError> {
    tokio::time::timeout(timeout, probe_once(target, creds)).await.unwrap_or(Err(ProbeError::Timeout(timeout)))
}

/// A fresh connection to a site with the operator's account (TCP, no
/// statement cache: every use is a single short exchange).
pub(crate) async fn connect(target: &ProbeTarget, creds: &Credentials) -> Result<Conn, ProbeError> {
    let opts = OptsBuilder::default()
        .ip_or_hostname(target.host.clone())
        .tcp_port(target.port)
        .user(Some(creds.username.clone()))
        .pass(Some(creds.password.clone()))
        .prefer_socket(false)
        .stmt_cache_size(0);
    Ok(Conn::new(opts).await?)
}

async fn probe_once(target: &ProbeTarget, creds: &Credentials) -> Result<SiteObservation, ProbeError> {
    let mut conn = connect(target, creds).await?;
    let result = observe(&mut conn).await;
    // A failed disconnect only loses a polite goodbye; the observation stands.
    let _ = conn.disconnect().await;
    result
}

async fn observe(conn: &mut Conn) -> Result<SiteObservation, ProbeError> {
    let (version, server_id, read_only): (String, u32, u8) = conn
        .query_first("SELECT @@version, @@server_id, @@read_only")
        .await?
        .ok_or_else(|| ProbeError::Unexpected("no row for @@version".into()))?;
    let flavor = Flavor::from_version(&version);
    // Before any statement of a newer server: an older one would fail them
    // (or take them otherwise), and the group must say why, not half work.
    if let Some(why) = super::statements::unsupported(flavor, &version) {
        return Err(ProbeError::Unsupported(why));
    }
    let mut server_uuid = String::new();
    let (writable, (gtid_position, gtid_binlog_state, gtid_slave_pos), status_sql, semi_sync) = match flavor {
        Flavor::MariaDb => {
            let row: Option<(String, String, String, u8, u8, u64, u8)> = conn
                .query_first(
                    "SELECT @@gtid_current_pos, @@gtid_binlog_state, @@gtid_slave_pos, @@rpl_semi_sync_master_enabled, @@rpl_semi_sync_slave_enabled, @@rpl_semi_sync_master_timeout, @@rpl_semi_sync_master_wait_no_slave",
                )
                .await?;
            let (gtid, state, slave, primary, replica, timeout_ms, no_replica) = row.unwrap_or_default();
            let semi = semi_sync(conn, flavor, (primary, replica, timeout_ms, no_replica)).await;
            (read_only == 0, (gtid, state, slave), "SHOW SLAVE STATUS", Some(semi))
        }
        Flavor::MySql => {
            let row: Option<(u8, String, String)> =
                conn.query_first("SELECT @@super_read_only, @@gtid_executed, @@server_uuid").await?;
            let (super_read_only, gtid, uuid) = row.unwrap_or((1, String::new(), String::new()));
            server_uuid = uuid;
            let semi = mysql_semi_sync(conn).await?;
            (read_only == 0 && super_read_only == 0, (gtid.clone(), gtid, String::new()), "SHOW REPLICA STATUS", semi)
        }
    };
    let rows: Vec<Row> = conn.query(status_sql).await?;
    let mut replication = rows.first().map(|row| ReplicationObservation::from_columns(&columns(row)));
    if let Some(r) = replication.as_mut() {
        (r.heartbeats, r.heartbeat_period_ms) = heartbeats(conn, flavor).await;
    }
    Ok(SiteObservation {
        flavor,
        version,
        server_id,
        server_uuid,
        writable,
        gtid_position: gtid_position.replace('\n', ""),
        gtid_binlog_state: gtid_binlog_state.replace('\n', ""),
        gtid_slave_pos: gtid_slave_pos.replace('\n', ""),
        replication,
        semi_sync,
    })
}

/// The replica's heartbeat count and period in milliseconds (its receiver
/// as a second observer of the primary: `bloodraven_core::failover::
/// emergency::Heard`). `None` for what it does not show: the reading is
/// evidence for one rule, not the probe's, so a server that refuses it is
/// still probed (the rule then falls back to the received position).
async fn heartbeats(conn: &mut Conn, flavor: Flavor) -> (Option<u64>, Option<u64>) {
    let read: Result<Vec<(String, String)>, _> = match flavor {
        // The status of the default connection, the one SHOW SLAVE STATUS shows.
        Flavor::MariaDb => {
            conn.query(
                "SHOW GLOBAL STATUS WHERE Variable_name IN ('Slave_received_heartbeats', 'Slave_heartbeat_period')",
            )
            .await
        }
        Flavor::MySql => {
            conn.query(
                "SELECT 'Slave_received_heartbeats', CAST(s.COUNT_RECEIVED_HEARTBEATS AS CHAR) \
                 FROM performance_schema.replication_connection_status s WHERE s.CHANNEL_NAME = '' \
                 UNION ALL SELECT 'Slave_heartbeat_period', CAST(c.HEARTBEAT_INTERVAL AS CHAR) \
                 FROM performance_schema.replication_connection_configuration c WHERE c.CHANNEL_NAME = ''",
            )
            .await
        }
    };
    let rows = match read {
        Ok(rows) => rows,
        Err(e) => {
            tracing::debug!(error = %classify(&ProbeError::from(e)).1, "heartbeats not readable");
            return (None, None);
        }
    };
    let value = |name: &str| rows.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_owned());
    let count = value("Slave_received_heartbeats").and_then(|v| v.parse().ok());
    let period = value("Slave_heartbeat_period")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|p| p.is_finite() && *p >= 0.0 && *p <= 4_294_967.0)
        .map(|p| (p * 1000.0).round() as u64);
    (count, period)
}

/// A MySQL site's semi-sync switches, or `None` when it has not loaded both
/// plugins (MySQL's semi-sync is two plugins, `semisync_source.so` and
/// `semisync_replica.so`, whose variables exist only once loaded; loading
/// them is the server's configuration, `plugin-load-add`, not the
/// operator's: `INSTALL PLUGIN` needs a data privilege on `mysql.plugin`).
async fn mysql_semi_sync(conn: &mut Conn) -> Result<Option<SemiSync>, ProbeError> {
    let active: Vec<String> = conn
        .query(
            "SELECT PLUGIN_NAME FROM information_schema.PLUGINS WHERE PLUGIN_STATUS = 'ACTIVE' \
             AND PLUGIN_NAME IN ('rpl_semi_sync_source', 'rpl_semi_sync_replica')",
        )
        .await?;
    if active.len() < 2 {
        return Ok(None);
    }
    let row: Option<(u8, u8, u64, u8)> = conn
        .query_first(
            "SELECT @@rpl_semi_sync_source_enabled, @@rpl_semi_sync_replica_enabled, @@rpl_semi_sync_source_timeout, @@rpl_semi_sync_source_wait_no_replica",
        )
        .await?;
    let Some(switches) = row else { return Ok(None) };
    Ok(Some(semi_sync(conn, Flavor::MySql, switches).await))
}

/// A site's semi-sync settings from its (primary switch, replica switch,
/// timeout, wait-with-no-replica) variables, with the commits waiting now
/// when it is a primary.
async fn semi_sync(
    conn: &mut Conn,
    flavor: Flavor,
    (primary, replica, timeout_ms, no_replica): (u8, u8, u64, u8),
) -> SemiSync {
    let primary = primary == 1;
    let waiting = if primary { semi_sync_waiting(conn, flavor).await } else { None };
    SemiSync { primary, replica: replica == 1, timeout_ms, wait_no_replica: no_replica == 1, waiting }
}

/// How many commits wait for a semi-sync acknowledgement on a primary
/// (a status variable). `None` when unreadable: the operator then reads
/// the process list before deciding a fallback.
async fn semi_sync_waiting(conn: &mut Conn, flavor: Flavor) -> Option<u32> {
    let sql = match flavor {
        Flavor::MariaDb => "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_wait_sessions'",
        Flavor::MySql => "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_source_wait_sessions'",
    };
    match conn.query_first::<(String, String), _>(sql).await {
        Ok(row) => row.and_then(|(_, v)| v.trim().parse().ok()),
        Err(e) => {
            tracing::debug!(error = %classify(&ProbeError::from(e)).1, "semi-sync status not readable");
            None
        }
    }
}

/// A result row as column name → text; NULL columns are left out.
fn columns(row: &Row) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for (i, col) in row.columns_ref().iter().enumerate() {
        let text = match row.as_ref(i) {
            Some(Value::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::Int(n)) => n.to_string(),
            Some(Value::UInt(n)) => n.to_string(),
            Some(Value::Double(n)) => n.to_string(),
            Some(Value::Float(n)) => n.to_string(),
            Some(Value::NULL) | None => continue,
            Some(other) => other.as_sql(true),
        };
        out.insert(col.name_str().into_owned(), text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_debug_never_prints_the_password() {
        let c = Credentials { username: "bloodraven".into(), password: "hunter2-very-secret".into() };
        let text = format!("{c:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("bloodraven"));
    }

    #[test]
    fn server_text_is_escaped_and_bounded() {
        let hostile = format!("\u{202e}{}\n{{\"level\":\"ERROR\"}}", "x".repeat(6000));
        let (_, m) = classify(&ProbeError::Unexpected(hostile));
        assert!(m.chars().count() <= MAX_ERROR_TEXT + 16, "{}", m.len());
        assert!(!m.contains('\u{202e}') && !m.contains('\n'), "{m}");
    }

    #[test]
    fn timeout_is_unreachable() {
        let (r, m) = classify(&ProbeError::Timeout(Duration::from_secs(2)));
        assert_eq!(r, reason::SITE_UNREACHABLE);
        assert!(m.contains("2s"), "{m}");
    }
}
