//! Optional detection of the DDL boundary from the database itself, for
//! migrations that do not report it: a fingerprint of the schema's tables,
//! columns and indexes (`information_schema`), and of the rows of the
//! history tables migration tools keep, taken at the grant and compared at
//! the end (or at the fence). Any difference means DDL started.
//!
//! It reads only `information_schema` and the history tables, with the
//! credentials given (`--db-url-file`, a mounted Secret: the URL holds a
//! password, so it is never taken from a flag and never printed).

use std::path::Path;
use std::time::Duration;

use bloodraven_api::names::HISTORY_TABLES;
use mysql_async::prelude::Queryable as _;
use sha2::{Digest as _, Sha256};

/// Longest a fingerprint read may take.
const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// Errors of the detection.
#[derive(Debug, thiserror::Error)]
pub enum DdlError {
    /// The URL file could not be read.
    #[error("failed to read the database URL file {path}: {source}")]
    File {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The URL is not a MySQL URL with a schema (its text is never shown: it holds a password).
    #[error("the database URL in {0} is not of the form mysql://user:password@host:port/schema")]
    Url(std::path::PathBuf),
    /// A query failed.
    #[error("failed to read the schema fingerprint: {0}")]
    Query(#[from] mysql_async::Error),
    /// It took too long.
    #[error("failed to read the schema fingerprint within {0:?}")]
    Timeout(Duration),
}

/// TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA.
type ColumnRow = (String, String, u64, String, String, Option<String>, String);

/// The two digests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fingerprint {
    /// SHA-256 over tables, columns and indexes.
    pub schema: String,
    /// SHA-256 over the history tables' rows.
    pub history: String,
}

/// A detector for one schema.
pub struct Detector {
    opts: mysql_async::Opts,
    schema: String,
    baseline: tokio::sync::Mutex<Option<Fingerprint>>,
}

impl std::fmt::Debug for Detector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the options: they hold the password.
        f.debug_struct("Detector").field("schema", &self.schema).finish_non_exhaustive()
    }
}

impl Detector {
    /// Reads the URL from `path` (`mysql://user:password@host:port/schema`).
    pub fn from_file(path: &Path) -> Result<Detector, DdlError> {
        // Bounded like every file the sidecar reads: a device or a wrong
        // mount is refused, not read forever.
        let bytes = crate::client::read_bounded(path, 64 * 1024)
            .map_err(|source| DdlError::File { path: path.to_owned(), source })?
            .ok_or_else(|| DdlError::Url(path.to_owned()))?;
        let text = String::from_utf8(bytes).map_err(|_| DdlError::Url(path.to_owned()))?;
        let opts = mysql_async::Opts::from_url(text.trim()).map_err(|_| DdlError::Url(path.to_owned()))?;
        let schema = opts
            .db_name()
            .map(str::to_owned)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| DdlError::Url(path.to_owned()))?;
        Ok(Detector { opts, schema, baseline: tokio::sync::Mutex::new(None) })
    }

    /// Takes the baseline (at the grant).
    pub async fn capture(&self) -> Result<(), DdlError> {
        let f = self.read().await?;
        *self.baseline.lock().await = Some(f);
        Ok(())
    }

    /// Whether the schema or a history table changed since the baseline
    /// (`false` without a baseline: nothing to compare with).
    pub async fn changed(&self) -> Result<bool, DdlError> {
        let Some(base) = self.baseline.lock().await.clone() else { return Ok(false) };
        Ok(self.read().await? != base)
    }

    async fn read(&self) -> Result<Fingerprint, DdlError> {
        tokio::time::timeout(READ_TIMEOUT, self.read_now()).await.map_err(|_| DdlError::Timeout(READ_TIMEOUT))?
    }

    async fn read_now(&self) -> Result<Fingerprint, DdlError> {
        let mut conn = mysql_async::Conn::new(self.opts.clone()).await?;
        let schema = self.schema.as_str();
        let mut h = Sha256::new();
        let tables: Vec<(String, String, Option<String>)> = conn
            .exec("SELECT TABLE_NAME, TABLE_TYPE, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME", (schema,))
            .await?;
        for t in &tables {
            h.update(format!("T{t:?}\n"));
        }
        let columns: Vec<ColumnRow> = conn
            .exec(
                "SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA \
                 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME, ORDINAL_POSITION",
                (schema,),
            )
            .await?;
        for c in &columns {
            h.update(format!("C{c:?}\n"));
        }
        let indexes: Vec<(String, String, u64, Option<String>, i64)> = conn
            .exec(
                "SELECT TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE \
                 FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
                (schema,),
            )
            .await?;
        for i in &indexes {
            h.update(format!("I{i:?}\n"));
        }
        let schema_digest = hex(&h.finalize());
        let mut h = Sha256::new();
        for table in HISTORY_TABLES {
            if !tables.iter().any(|t| t.0 == *table) {
                continue;
            }
            // The names are constants of this file, never input.
            let rows: Vec<mysql_async::Row> =
                conn.query(format!("SELECT * FROM `{schema}`.`{table}`", schema = schema.replace('`', "``"))).await?;
            let mut lines: Vec<String> = rows.iter().map(|r| format!("{:?}", r.clone().unwrap())).collect();
            lines.sort();
            h.update(format!("H {table} {}\n", lines.len()));
            for l in lines {
                h.update(l);
                h.update(b"\n");
            }
        }
        let _ = conn.disconnect().await;
        Ok(Fingerprint { schema: schema_digest, history: hex(&h.finalize()) })
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_url_never_shows_its_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("url");
        for bad in ["postgres://u:hunter2@h/db", "mysql://u:hunter2@h:3306", "not a url hunter2"] {
            std::fs::write(&path, bad).unwrap();
            let e = Detector::from_file(&path).unwrap_err().to_string();
            assert!(!e.contains("hunter2"), "{e}");
            assert!(e.contains("mysql://user:password@host:port/schema"), "{e}");
        }
        std::fs::write(&path, "mysql://u:hunter2@h:3306/counter\n").unwrap();
        let d = Detector::from_file(&path).unwrap();
        assert_eq!(d.schema, "counter");
        assert!(!format!("{d:?}").contains("hunter2"));
        let e = Detector::from_file(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("is not of the form"), "{e}");
        let e = Detector::from_file(&dir.path().join("missing")).unwrap_err().to_string();
        assert!(e.starts_with("failed to read the database URL file"), "{e}");
    }
}
