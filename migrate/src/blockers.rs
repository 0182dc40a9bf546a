//! Who holds or waits for locks: the pre-flight look before each DDL
//! statement, and `diagnose` (two queries —
//! sessions idle in a transaction with their age, and the lock-wait graph
//! with both queries — for MySQL and MariaDB).
//!
//! Sources: `information_schema.INNODB_TRX` joined with the process list
//! (open transactions, their age, idle sessions: `COMMAND = 'Sleep'` inside
//! a transaction); metadata locks from `performance_schema.metadata_locks`
//! on MySQL and `information_schema.METADATA_LOCK_INFO` on MariaDB when the
//! `metadata_lock_info` plugin is loaded; row-lock waits from
//! `INNODB_LOCK_WAITS` (MariaDB) or `performance_schema.data_lock_waits`
//! (MySQL 8). Without a metadata-lock source, every open transaction that
//! is idle or uses the revision's schema counts as a possible blocker,
//! and the report says that the tables it holds are not visible.
//!
//! The account needs `PROCESS` to see other sessions (docs/migrate.md).

use mysql_async::prelude::Queryable as _;

use crate::db::{Flavor, Session};
use crate::revision::TableRef;

/// One session that holds or waits for a lock the DDL needs.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Blocker {
    /// Connection id (`KILL` takes it).
    pub id: u64,
    /// `user@host`.
    pub who: String,
    /// Its default schema.
    pub db: String,
    /// Seconds its transaction has been open (`None`: no InnoDB transaction).
    pub trx_age: Option<u64>,
    /// Seconds idle inside its transaction (`COMMAND = 'Sleep'`), or `None` when running.
    pub idle_for: Option<u64>,
    /// What it runs now (empty while idle: the server no longer shows an idle session's last query).
    pub query: String,
    /// The metadata lock it holds or waits for on one of the tables, when known.
    pub lock: Option<String>,
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "connection {} ({}", self.id, self.who)?;
        if !self.db.is_empty() {
            write!(f, ", schema {}", self.db)?;
        }
        write!(f, ")")?;
        match (self.idle_for, self.trx_age) {
            (Some(idle), Some(age)) => write!(f, " idle in a transaction for {idle} s, open {age} s")?,
            (Some(idle), None) => write!(f, " idle for {idle} s")?,
            (None, Some(age)) => write!(f, " in a transaction open {age} s")?,
            (None, None) => {}
        }
        if let Some(lock) = &self.lock {
            write!(f, ", {lock}")?;
        }
        let q = one_line(&self.query, 200);
        if q.is_empty() { write!(f, ", query: (none while idle)") } else { write!(f, ", query: {q}") }
    }
}

/// A query on one line, at most `max` characters.
pub fn one_line(q: &str, max: usize) -> String {
    let q = crate::redact::redact(q);
    let flat: String = q.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max { format!("{}…", flat.chars().take(max).collect::<String>()) } else { flat }
}

/// What the pre-flight found.
#[derive(Clone, Debug, Default)]
pub struct Found {
    /// The sessions.
    pub blockers: Vec<Blocker>,
    /// Whether metadata locks were visible (else: open transactions only).
    pub exact: bool,
}

type TrxRow = (u64, String, String, String, u64, Option<u64>, String);

/// Open transactions of other sessions, oldest first. Without `PROCESS`
/// this fails (1227) rather than find none.
async fn open_transactions(s: &mut Session) -> Result<Vec<Blocker>, mysql_async::Error> {
    // Reading `INNODB_TRX` needs PROCESS, but the join below does not
    // always read it: without PROCESS the process list shows the session
    // alone, which the join filters out, and MySQL 9.7 then answers no
    // rows and no error. Read it alone first, so that a blind look fails.
    let _: Option<u64> = s.conn.query_first("SELECT COUNT(*) FROM information_schema.INNODB_TRX").await?;
    let rows: Vec<TrxRow> = s
        .conn
        .query(
            "SELECT p.ID, CONCAT(p.USER, '@', p.HOST), COALESCE(p.DB, ''), p.COMMAND, CAST(p.TIME AS UNSIGNED), \
             CAST(TIMESTAMPDIFF(SECOND, t.trx_started, NOW()) AS UNSIGNED), COALESCE(t.trx_query, p.INFO, '') \
             FROM information_schema.INNODB_TRX t JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
             WHERE p.ID <> CONNECTION_ID() ORDER BY t.trx_started",
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|(id, who, db, command, time, age, query)| Blocker {
            id,
            who,
            db,
            trx_age: age,
            idle_for: (command == "Sleep").then_some(time),
            query,
            lock: None,
        })
        .collect())
}

/// Whether MariaDB's `metadata_lock_info` plugin is active.
async fn mdl_plugin(s: &mut Session) -> Result<bool, mysql_async::Error> {
    let n: Option<u64> = s
        .conn
        .query_first(
            "SELECT COUNT(*) FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'METADATA_LOCK_INFO' AND PLUGIN_STATUS = 'ACTIVE'",
        )
        .await?;
    Ok(n.unwrap_or(0) > 0)
}

/// `(connection id, lock description, schema, table)` of metadata locks
/// other sessions hold (or, on MySQL, wait for); `None` when not visible.
async fn metadata_locks(s: &mut Session) -> Result<Option<Vec<(u64, String, String, String)>>, mysql_async::Error> {
    match s.flavor {
        Flavor::MariaDb => {
            if !mdl_plugin(s).await? {
                return Ok(None);
            }
            let rows: Vec<(u64, String, String, String)> = s
                .conn
                .query(
                    "SELECT THREAD_ID, CONCAT('holds ', LOCK_MODE, ' on ', TABLE_SCHEMA, '.', TABLE_NAME), TABLE_SCHEMA, TABLE_NAME \
                     FROM information_schema.METADATA_LOCK_INFO WHERE THREAD_ID <> CONNECTION_ID() AND TABLE_NAME <> ''",
                )
                .await?;
            Ok(Some(rows))
        }
        // MySQL names a lock type without MariaDB's `MDL_` prefix
        // (`SHARED_READ`); the prefix keeps one name per lock in the output.
        Flavor::MySql => {
            // With performance_schema off its tables answer, empty.
            let on: Option<u64> = s.conn.query_first("SELECT @@GLOBAL.performance_schema").await?;
            if on != Some(1) {
                return Ok(None);
            }
            let rows: Result<Vec<(u64, String, String, String)>, _> = s
                .conn
                .query(
                    "SELECT t.PROCESSLIST_ID, CONCAT(IF(ml.LOCK_STATUS = 'GRANTED', 'holds ', 'waits for '), 'MDL_', ml.LOCK_TYPE, ' on ', \
                     ml.OBJECT_SCHEMA, '.', ml.OBJECT_NAME), ml.OBJECT_SCHEMA, ml.OBJECT_NAME \
                     FROM performance_schema.metadata_locks ml JOIN performance_schema.threads t ON t.THREAD_ID = ml.OWNER_THREAD_ID \
                     WHERE ml.OBJECT_TYPE = 'TABLE' AND t.PROCESSLIST_ID IS NOT NULL AND t.PROCESSLIST_ID <> CONNECTION_ID()",
                )
                .await;
            match rows {
                Ok(rows) => Ok(Some(rows)),
                // No SELECT on performance_schema (1142, 1044), or its
                // tables absent (1146): not visible. Any other failure is one.
                Err(mysql_async::Error::Server(e)) if matches!(e.code, 1142 | 1044 | 1146) => Ok(None),
                Err(e) => Err(e),
            }
        }
    }
}

/// Sessions waiting for a metadata lock (queued DDL or readers behind it).
async fn mdl_waiters(s: &mut Session) -> Result<Vec<Blocker>, mysql_async::Error> {
    let rows: Vec<(u64, String, String, u64, String)> = s
        .conn
        .query(
            "SELECT ID, CONCAT(USER, '@', HOST), COALESCE(DB, ''), CAST(TIME AS UNSIGNED), COALESCE(INFO, '') \
             FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND STATE LIKE 'Waiting for table metadata lock%'",
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|(id, who, db, time, query)| Blocker {
            id,
            who,
            db,
            query,
            lock: Some(format!("waiting {time} s for a metadata lock")),
            ..Blocker::default()
        })
        .collect())
}

/// Process-list details of connection `id`, for a metadata-lock holder
/// with no InnoDB transaction (LOCK TABLES, a non-InnoDB table).
async fn session(s: &mut Session, id: u64) -> Result<Option<Blocker>, mysql_async::Error> {
    let row: Option<(String, String, String, u64, String)> = s
        .conn
        .exec_first(
            "SELECT CONCAT(USER, '@', HOST), COALESCE(DB, ''), COMMAND, CAST(TIME AS UNSIGNED), COALESCE(INFO, '') \
             FROM information_schema.PROCESSLIST WHERE ID = ?",
            (id,),
        )
        .await?;
    Ok(row.map(|(who, db, command, time, query)| Blocker {
        id,
        who,
        db,
        idle_for: (command == "Sleep").then_some(time),
        query,
        ..Blocker::default()
    }))
}

fn named(tables: &[TableRef], default_schema: &str, schema: &str, table: &str) -> bool {
    tables.iter().any(|(s, t)| t == table && s.as_deref().unwrap_or(default_schema) == schema)
}

/// The pre-flight look for a DDL statement on `tables`.
pub async fn preflight(s: &mut Session, tables: &[TableRef]) -> Result<Found, mysql_async::Error> {
    let trx = open_transactions(s).await?;
    let schema = s.schema.clone();
    let Some(locks) = metadata_locks(s).await? else {
        // Not visible: every open transaction idle or on this schema may hold one.
        let blockers =
            trx.into_iter().filter(|b| b.idle_for.is_some() || b.db == schema || !b.query.is_empty()).collect();
        return Ok(Found { blockers, exact: false });
    };
    let mut blockers: Vec<Blocker> = Vec::new();
    for (id, lock, lschema, ltable) in locks {
        if !named(tables, &schema, &lschema, &ltable) || blockers.iter().any(|b| b.id == id) {
            continue;
        }
        let mut b = match trx.iter().find(|b| b.id == id) {
            Some(b) => b.clone(),
            None => match session(s, id).await? {
                Some(b) => b,
                None => continue,
            },
        };
        b.lock = Some(lock);
        blockers.push(b);
    }
    // Sessions already queued for a metadata lock on these tables are ahead of us too.
    for w in mdl_waiters(s).await? {
        let theirs = crate::revision::tables_named(&w.query);
        let on_ours = theirs.iter().any(|(ts, t)| named(tables, &schema, ts.as_deref().unwrap_or(&w.db), t));
        if on_ours && !blockers.iter().any(|b| b.id == w.id) {
            blockers.push(w);
        }
    }
    Ok(Found { blockers, exact: true })
}

/// One edge of the lock-wait graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    /// The waiting session.
    pub waiting: Blocker,
    /// Seconds it has waited.
    pub waited: u64,
    /// What it waits for: `row lock` or `metadata lock`.
    pub what: &'static str,
    /// The session it waits for.
    pub blocking: Blocker,
}

/// The report of `diagnose`.
#[derive(Clone, Debug, Default)]
pub struct Diagnosis {
    /// Every open transaction of another session, oldest first.
    pub open: Vec<Blocker>,
    /// Who waits for whom.
    pub waits: Vec<Wait>,
    /// Whether metadata-lock holders were visible.
    pub mdl_visible: bool,
}

/// Reads the open transactions and the lock-wait graph.
pub async fn diagnose(s: &mut Session) -> Result<Diagnosis, mysql_async::Error> {
    let mut open = open_transactions(s).await?;
    // Metadata-lock holders: what each open transaction holds, when visible.
    let locks = metadata_locks(s).await?;
    if let Some(locks) = &locks {
        for b in &mut open {
            let held: Vec<&str> = locks.iter().filter(|l| l.0 == b.id).map(|l| l.1.as_str()).take(3).collect();
            if !held.is_empty() {
                b.lock = Some(held.join(", "));
            }
        }
    }
    let by_id = |id: u64, open: &[Blocker]| open.iter().find(|b| b.id == id).cloned();
    let mut waits = Vec::new();
    // Row-lock waits.
    let row_waits: Vec<(u64, u64, u64, String, String)> = match s.flavor {
        Flavor::MariaDb => s
            .conn
            .query(
                "SELECT r.trx_mysql_thread_id, b.trx_mysql_thread_id, \
                 CAST(TIMESTAMPDIFF(SECOND, r.trx_wait_started, NOW()) AS UNSIGNED), COALESCE(r.trx_query, ''), COALESCE(b.trx_query, '') \
                 FROM information_schema.INNODB_LOCK_WAITS w \
                 JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id \
                 JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id",
            )
            .await?,
        Flavor::MySql => s
            .conn
            .query(
                "SELECT r.trx_mysql_thread_id, b.trx_mysql_thread_id, \
                 CAST(TIMESTAMPDIFF(SECOND, r.trx_wait_started, NOW()) AS UNSIGNED), COALESCE(r.trx_query, ''), COALESCE(b.trx_query, '') \
                 FROM performance_schema.data_lock_waits w \
                 JOIN information_schema.INNODB_TRX r ON r.trx_id = w.REQUESTING_ENGINE_TRANSACTION_ID \
                 JOIN information_schema.INNODB_TRX b ON b.trx_id = w.BLOCKING_ENGINE_TRANSACTION_ID",
            )
            .await
            .unwrap_or_default(),
    };
    for (rid, bid, waited, rq, bq) in row_waits {
        let waiting = by_id(rid, &open).unwrap_or_else(|| Blocker { id: rid, query: rq.clone(), ..Blocker::default() });
        let blocking =
            by_id(bid, &open).unwrap_or_else(|| Blocker { id: bid, query: bq.clone(), ..Blocker::default() });
        waits.push(Wait { waiting, waited, what: "row lock", blocking });
    }
    // Metadata-lock waits: each waiter against the holders of the tables its query names.
    let mdl_visible = locks.is_some();
    for w in mdl_waiters(s).await? {
        let waited =
            w.lock.as_deref().and_then(|l| l.split_whitespace().nth(1)).and_then(|n| n.parse().ok()).unwrap_or(0);
        let tables = crate::revision::tables_named(&w.query);
        let holders: Vec<u64> = match &locks {
            Some(locks) => locks
                .iter()
                .filter(|(id, lock, schema, table)| {
                    *id != w.id && lock.starts_with("holds") && named(&tables, &w.db, schema, table)
                })
                .map(|(id, ..)| *id)
                .collect(),
            // Not visible: every open transaction is a candidate.
            None => open.iter().map(|b| b.id).collect(),
        };
        let mut seen = Vec::new();
        for id in holders {
            if seen.contains(&id) {
                continue;
            }
            seen.push(id);
            let mut blocking = match by_id(id, &open) {
                Some(b) => b,
                None => session(s, id).await?.unwrap_or(Blocker { id, ..Blocker::default() }),
            };
            if let Some(locks) = &locks {
                blocking.lock = locks.iter().find(|l| l.0 == id).map(|l| l.1.clone());
            }
            let mut waiting = w.clone();
            waiting.lock = None;
            waits.push(Wait { waiting, waited, what: "metadata lock", blocking });
        }
    }
    Ok(Diagnosis { open, waits, mdl_visible })
}

impl std::fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "open transactions ({}), oldest first:", self.open.len())?;
        for b in &self.open {
            writeln!(f, "  {b}")?;
        }
        writeln!(f, "lock waits ({}):", self.waits.len())?;
        for w in &self.waits {
            writeln!(
                f,
                "  connection {} waiting {} s for a {} ({}) is blocked by {}",
                w.waiting.id,
                w.waited,
                w.what,
                one_line(&w.waiting.query, 200),
                w.blocking
            )?;
        }
        if !self.mdl_visible {
            writeln!(
                f,
                "metadata-lock holders are not visible (MariaDB: INSTALL SONAME 'metadata_lock_info'; MySQL: performance_schema); \
                 a waiter is shown against every open transaction"
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocker_reads_as_a_person_needs_it() {
        let b = Blocker {
            id: 42,
            who: "app@10.0.0.7:5123".into(),
            db: "shop".into(),
            trx_age: Some(130),
            idle_for: Some(120),
            query: String::new(),
            lock: Some("holds MDL_SHARED_READ on shop.orders".into()),
        };
        assert_eq!(
            b.to_string(),
            "connection 42 (app@10.0.0.7:5123, schema shop) idle in a transaction for 120 s, open 130 s, \
             holds MDL_SHARED_READ on shop.orders, query: (none while idle)"
        );
        let running = Blocker { idle_for: None, query: "SELECT *\n  FROM orders".into(), lock: None, ..b };
        assert!(running.to_string().ends_with("in a transaction open 130 s, query: SELECT * FROM orders"));
        assert_eq!(one_line(&"x".repeat(10), 4), "xxxx…");
    }

    #[test]
    fn tables_match_with_the_default_schema() {
        let t = vec![(None, "orders".to_owned()), (Some("other".to_owned()), "t".to_owned())];
        assert!(named(&t, "shop", "shop", "orders"));
        assert!(!named(&t, "shop", "other", "orders"));
        assert!(named(&t, "shop", "other", "t"));
    }

    #[test]
    fn attack_passwords_in_other_sessions_queries_and_server_messages_are_redacted() {
        for q in [
            "CREATE USER 'x'@'%' IDENTIFIED BY 'hunter2-secret'",
            "ALTER USER x IDENTIFIED VIA mysql_native_password USING PASSWORD(\"hunter2-secret\")",
            "SET PASSWORD FOR 'x'@'%' = PASSWORD('hunter2-\\'secret')",
            "You have an error in your SQL syntax; near 'IDENTIFIED BY 'hunter2-secret'' at line 1",
        ] {
            let r = one_line(q, 500);
            assert!(!r.contains("hunter2") && !r.contains("secret"), "{r}");
        }
        assert_eq!(one_line("UPDATE t SET a = 'x'", 100), "UPDATE t SET a = 'x'", "other queries as they are");
    }
}
