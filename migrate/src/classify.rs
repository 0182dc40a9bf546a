//! What to do about an error, by the server's numeric error code only —
//! never by its message text (messages are translated and change between
//! versions; codes do not).
//!
//! Rule (a bounded retry loop; docs/migrate.md, "Retries"): only lock
//! contention is retried — deadlock 1213 and lock wait timeout 1205 (InnoDB
//! row locks and, since `lock_wait_timeout`, metadata locks). Everything else
//! fails on the first attempt with its own message: a statement timeout
//! (MySQL 3024, MariaDB 1969: too slow, not unlucky — it would fail
//! identically every time, each time holding its lock for the whole
//! timeout), a killed query (1317), a read-only refusal (1290, and 1836 for
//! super_read_only: the site was fenced), a lost connection, and every other
//! or unknown code.

/// MySQL/MariaDB server error codes the runner names.
pub mod code {
    /// ER_LOCK_WAIT_TIMEOUT: row lock (innodb_lock_wait_timeout) or
    /// metadata lock (lock_wait_timeout) wait ran out.
    pub const LOCK_WAIT_TIMEOUT: u16 = 1205;
    /// ER_LOCK_DEADLOCK: chosen as a deadlock victim (transaction rolled back).
    pub const DEADLOCK: u16 = 1213;
    /// ER_QUERY_INTERRUPTED: the query was killed (`KILL QUERY`).
    pub const QUERY_INTERRUPTED: u16 = 1317;
    /// ER_OPTION_PREVENTS_STATEMENT: `--read-only` (the site was fenced).
    pub const READ_ONLY: u16 = 1290;
    /// ER_READ_ONLY_MODE (MySQL `super_read_only`, transactions in read-only mode).
    pub const READ_ONLY_MODE: u16 = 1836;
    /// MySQL ER_QUERY_TIMEOUT: `max_execution_time` exceeded.
    pub const MYSQL_STATEMENT_TIMEOUT: u16 = 3024;
    /// MariaDB ER_STATEMENT_TIMEOUT: `max_statement_time` exceeded.
    pub const MARIADB_STATEMENT_TIMEOUT: u16 = 1969;
    /// ER_CONNECTION_KILLED (MariaDB): this connection was killed.
    pub const CONNECTION_KILLED: u16 = 1927;
    /// ER_SERVER_SHUTDOWN.
    pub const SERVER_SHUTDOWN: u16 = 1053;
    /// CR_SERVER_GONE_ERROR (client): the server went away.
    pub const SERVER_GONE: u16 = 2006;
    /// CR_SERVER_LOST (client): lost connection during a query.
    pub const SERVER_LOST: u16 = 2013;
}

/// What an error means for the revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// 1213 or 1205: re-run the whole revision from its first statement,
    /// after a jittered backoff, while attempts remain.
    LockContention,
    /// 3024 or 1969: too slow; drain the readers instead. Not retried.
    StatementTimeout,
    /// 1317: someone killed the query. Not retried.
    Killed,
    /// 1290 or 1836: the site is read-only (fenced). Not retried, never
    /// followed to another site.
    ReadOnly,
    /// The connection is gone (2006, 2013, 1927, 1053, or an I/O error):
    /// the run ends; the runner never reconnects on its own.
    ConnectionLost,
    /// Anything else, known or not: the revision's own error. Not retried.
    Other,
}

impl Class {
    /// Whether a revision that failed with this class is tried again.
    pub const fn retried(self) -> bool {
        matches!(self, Class::LockContention)
    }

    /// A short, stable name for logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Class::LockContention => "lock-contention",
            Class::StatementTimeout => "statement-timeout",
            Class::Killed => "killed",
            Class::ReadOnly => "read-only",
            Class::ConnectionLost => "connection-lost",
            Class::Other => "error",
        }
    }
}

/// The class of a server (or client, 2xxx) error code.
pub const fn of_code(code: u16) -> Class {
    match code {
        code::DEADLOCK | code::LOCK_WAIT_TIMEOUT => Class::LockContention,
        code::MYSQL_STATEMENT_TIMEOUT | code::MARIADB_STATEMENT_TIMEOUT => Class::StatementTimeout,
        code::QUERY_INTERRUPTED => Class::Killed,
        code::READ_ONLY | code::READ_ONLY_MODE => Class::ReadOnly,
        code::SERVER_GONE | code::SERVER_LOST | code::CONNECTION_KILLED | code::SERVER_SHUTDOWN => {
            Class::ConnectionLost
        }
        _ => Class::Other,
    }
}

/// Whether `code` is a privilege refusal (ER_DBACCESS_DENIED_ERROR 1044,
/// ER_TABLEACCESS_DENIED_ERROR 1142, ER_COLUMNACCESS_DENIED_ERROR 1143,
/// ER_SPECIFIC_ACCESS_DENIED_ERROR 1227): for the runner's own look at
/// other sessions, a blind look rather than a failed revision.
pub const fn is_privilege(code: u16) -> bool {
    matches!(code, 1044 | 1142 | 1143 | 1227)
}

/// A driver error in words, once: mysql_async's own text wraps each layer
/// (`Input/output error: Input/output error: …`) and quotes a server error
/// with mismatched quotes (`` Server error: `ERROR 1205 …' ``).
///
/// The one place a driver error becomes text, so the one place it is
/// redacted ([`crate::redact`]): a server error quotes the statement near a
/// syntax error, which may hold the database password (a revision linked
/// to the password file) or an `IDENTIFIED BY '…'`.
pub fn describe(e: &mysql_async::Error) -> String {
    crate::redact::redact(&describe_raw(e))
}

fn describe_raw(e: &mysql_async::Error) -> String {
    match e {
        mysql_async::Error::Server(s) => format!("ERROR {} ({}): {}", s.code, s.state, s.message),
        mysql_async::Error::Io(mysql_async::IoError::Io(io)) => format!("I/O error: {io}"),
        mysql_async::Error::Io(other) => other.to_string(),
        mysql_async::Error::Driver(d) => format!("driver error: {d}"),
        mysql_async::Error::Url(u) => format!("URL error: {u}"),
        mysql_async::Error::Other(o) => o.to_string(),
    }
}

/// The class and code (when the server sent one) of a driver error. Any
/// I/O or driver error (connection closed, packet out of order) is a lost
/// connection: the session's state (its transaction, its settings) is gone.
pub fn of_error(e: &mysql_async::Error) -> (Class, Option<u16>) {
    match e {
        mysql_async::Error::Server(s) => (of_code(s.code), Some(s.code)),
        mysql_async::Error::Io(_) | mysql_async::Error::Driver(_) => (Class::ConnectionLost, None),
        mysql_async::Error::Other(_) | mysql_async::Error::Url(_) => (Class::Other, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_deadlock_and_lock_wait_timeout_are_retried() {
        let table = [
            (1213, Class::LockContention),
            (1205, Class::LockContention),
            (3024, Class::StatementTimeout),
            (1969, Class::StatementTimeout),
            (1317, Class::Killed),
            (1290, Class::ReadOnly),
            (1836, Class::ReadOnly),
            (2006, Class::ConnectionLost),
            (2013, Class::ConnectionLost),
            (1927, Class::ConnectionLost),
            (1064, Class::Other),
            (1146, Class::Other),
            (1062, Class::Other),
        ];
        for (c, want) in table {
            assert_eq!(of_code(c), want, "{c}");
        }
        for c in 0..=u16::MAX {
            assert_eq!(of_code(c).retried(), c == 1213 || c == 1205, "{c}");
        }
    }

    #[test]
    fn the_message_never_decides() {
        let server = |code, message: &str| {
            mysql_async::Error::Server(mysql_async::ServerError {
                code,
                message: message.into(),
                state: "HY000".into(),
            })
        };
        // A deadlock-sounding message with another code is not retried.
        assert_eq!(of_error(&server(1064, "Deadlock found when trying to get lock")), (Class::Other, Some(1064)));
        assert_eq!(of_error(&server(1213, "anything at all")), (Class::LockContention, Some(1213)));
        let io = mysql_async::Error::Io(mysql_async::IoError::Io(std::io::Error::other("broken pipe")));
        assert_eq!(of_error(&io), (Class::ConnectionLost, None));
        let driver = mysql_async::Error::Driver(mysql_async::DriverError::ConnectionClosed);
        assert_eq!(describe(&io), "I/O error: broken pipe");
        assert_eq!(describe(&driver), "driver error: Connection to the server is closed.");
        assert_eq!(of_error(&driver), (Class::ConnectionLost, None));
    }

    #[test]
    fn attack_privilege_refusals_are_named_and_never_retried() {
        for c in [1044, 1142, 1143, 1227] {
            assert!(is_privilege(c) && !of_code(c).retried(), "{c}");
        }
        for c in [1205, 1213, 1290, 1969, 2013, 1064] {
            assert!(!is_privilege(c), "{c}");
        }
    }
}
