//! Revision files: `V<n>__<description>.sql` in one directory (Flyway's
//! versioned-migration naming, so teams can move over), split into
//! statements and classified as DDL or DML.
//!
//! Model:
//! - version: the decimal `<n>` (a `u64`; `V001` and `V1` are the same
//!   version, and two files of one version are refused);
//! - description: `<description>` with `_` read as a space (Flyway);
//! - checksum: SHA-256 of the file's text, lowercase hex (64 characters),
//!   with CRLF read as LF and a leading byte-order mark dropped (a
//!   checkout's line endings are not a change); any other byte changed in
//!   an applied revision stops the run;
//! - statements: split on `;` outside quotes (`'…'`, `"…"`, `` `…` ``)
//!   and comments (`-- `, `#`, `/* … */`); `DELIMITER` (a client command)
//!   and transaction control (`BEGIN`, `START TRANSACTION`, `COMMIT`,
//!   `ROLLBACK`, `SAVEPOINT`, `XA`, `SET autocommit`) are refused: the
//!   runner owns the transaction of a revision (one commit per revision,
//!   with its history row).
//! - kind: a statement is DML when it starts with `INSERT`, `UPDATE`,
//!   `DELETE`, `REPLACE`, `SELECT`, `WITH`, `DO` or `SET`; everything else
//!   is taken as DDL, because in MySQL and MariaDB almost every other
//!   statement commits implicitly (and a `CALL` may run anything). A
//!   revision with any DDL is a DDL revision (marked `started` before its
//!   first statement); one without is applied atomically with its history row.
//!
//! Files (docs/migrate.md, "Revisions"):
//! - a revision is read only when its real path (symlinks resolved) is
//!   inside the directory's real path: a link within the directory is read
//!   as the file it points to (a ConfigMap volume is links into its own
//!   `..data`), a link out of it is refused — a revision linked to the
//!   database URL file or the password file would send the secret to the
//!   server, which quotes it back in its error;
//! - at most [`MAX_REVISION_BYTES`], checked from the file's metadata
//!   before it is read and again while reading (a file growing meanwhile);
//! - a name holding a control or invisible formatting character is refused
//!   (it would forge or hide log lines), and every name is printed through
//!   [`escape`].
//!
//! The splitter is hand-written on purpose: the runner needs statement
//! boundaries only, and a full SQL parser (sqlparser-rs) refuses MariaDB
//! syntax it does not know, which would refuse valid revisions.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

mod sql;

use sql::classify;
pub use sql::{split, tables_named};

/// The largest revision file read, bytes (16 MiB, MariaDB's default
/// `max_allowed_packet`): a larger file is refused before it is read, so a
/// stray dump in the directory cannot exhaust the container's memory.
pub const MAX_REVISION_BYTES: u64 = 16 << 20;

/// Why a revision directory or file cannot be used. File names in it are
/// escaped ([`escape`]).
#[derive(Debug, thiserror::Error)]
pub enum RevisionError {
    /// The directory or a file could not be read.
    #[error("failed to read {}: {source}", escape(&path.to_string_lossy()))]
    Read {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A revision resolves to a file outside the directory.
    #[error(
        "{file}: resolves to a file outside the revision directory (a symlink out of it): a revision is read only from inside --dir; copy the file in instead"
    )]
    Outside {
        /// The file name.
        file: String,
    },
    /// A revision file is larger than [`MAX_REVISION_BYTES`].
    #[error(
        "{file}: is {size} bytes, more than a revision may be ({max} bytes); split it into several revisions, or load bulk data another way"
    )]
    TooLarge {
        /// The file name.
        file: String,
        /// Its size (at least), bytes.
        size: u64,
        /// [`MAX_REVISION_BYTES`].
        max: u64,
    },
    /// A file looks like a revision but is not named `V<n>__<description>.sql`.
    #[error("{file}: not a revision name: {why} (expected V<n>__<description>.sql, e.g. V3__add_orders_index.sql)")]
    Name {
        /// The file name.
        file: String,
        /// What is wrong.
        why: &'static str,
    },
    /// Two files have the same version.
    #[error("version {version} is given twice: {first} and {second}")]
    Duplicate {
        /// The version.
        version: u64,
        /// One file.
        first: String,
        /// The other.
        second: String,
    },
    /// A statement the runner refuses to run.
    #[error("{file}: statement {index}: {why}")]
    Statement {
        /// The file name.
        file: String,
        /// 1-based statement number.
        index: usize,
        /// What is wrong, and what to do instead.
        why: String,
    },
    /// A revision file is not UTF-8 or has no statement.
    #[error("{file}: {why}")]
    Content {
        /// The file name.
        file: String,
        /// What is wrong.
        why: &'static str,
    },
}

/// A table a statement names: `(schema when qualified, table)`.
pub type TableRef = (Option<String>, String);

/// DDL (commits implicitly) or DML (runs inside the revision's transaction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Data manipulation: transactional.
    Dml,
    /// Anything else: taken to commit implicitly.
    Ddl,
}

/// One statement of a revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement {
    /// The SQL text, trimmed, without the trailing `;`.
    pub sql: String,
    /// DDL or DML.
    pub kind: Kind,
    /// For DDL: the tables it names (`(schema, table)`, schema when
    /// qualified), the ones the pre-flight blocker look asks about.
    pub tables: Vec<TableRef>,
}

/// A revision file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revision {
    /// The version `<n>`.
    pub version: u64,
    /// The description, `_` read as a space.
    pub description: String,
    /// The file name, escaped for printing ([`escape`]; the name as it is
    /// for every name [`load_dir`] accepts but one with a backslash).
    pub file: String,
    /// SHA-256 of the file's text with line endings as `\n` and no
    /// byte-order mark, lowercase hex: a checkout that turns LF into CRLF
    /// (git `autocrlf` on Windows) is the same revision.
    pub checksum: String,
    /// SHA-256 of the file's bytes as they are (what runners before the
    /// line-ending rule recorded; still accepted for an applied revision).
    pub raw_checksum: String,
    /// Its statements, in order.
    pub statements: Vec<Statement>,
}

impl Revision {
    /// Whether any statement is DDL.
    pub fn has_ddl(&self) -> bool {
        self.statements.iter().any(|s| s.kind == Kind::Ddl)
    }
}

/// Parses a file name: `Some((version, description))` for
/// `V<n>__<description>.sql`; `None` for a file that is not meant as a
/// revision; an error for one that looks meant as a revision but is
/// misnamed — never silently skipped, since a skipped revision is a
/// schema change that quietly never happens. A name is taken as meant
/// when it starts with `V` or `v` followed by a digit (`v3__x.sql`,
/// `V3__x.SQL`, `V3__x.sql~`), or starts with `V` and ends in `.sql` in
/// any case. Flyway's other prefixes (`R__`, `U<n>__`) are ignored.
pub fn parse_name(name: &str) -> Result<Option<(u64, String)>, RevisionError> {
    let bad = |why| RevisionError::Name { file: escape(name), why };
    let b = name.as_bytes();
    let digit_after_v = matches!(b.first(), Some(b'V' | b'v')) && b.get(1).is_some_and(u8::is_ascii_digit);
    let sql_suffix = name.to_ascii_lowercase().ends_with(".sql");
    let meant = digit_after_v || (b.first() == Some(&b'V') && sql_suffix);
    if !meant {
        return Ok(None);
    }
    if name.chars().any(hidden) {
        return Err(bad(
            "it holds a control or invisible formatting character (shown escaped here), which would forge or hide log lines; rename the file",
        ));
    }
    if b.first() == Some(&b'v') {
        return Err(bad("the prefix must be an uppercase V (a lowercase v would be skipped by Flyway)"));
    }
    let Some(stem) = name[1..].strip_suffix(".sql") else {
        return Err(bad(
            "the extension must be `.sql` in lowercase (move editor backups and other files out of the directory)",
        ));
    };
    let (version, description) = stem.split_once("__").ok_or_else(|| bad("no `__` after the version"))?;
    if version.is_empty() || !version.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("the version must be decimal digits (dotted versions are not supported)"));
    }
    let version: u64 = version.parse().map_err(|_| bad("the version is too large"))?;
    if description.is_empty() {
        return Err(bad("the description is empty"));
    }
    if description.len() > 200 {
        return Err(bad("the description is longer than 200 bytes"));
    }
    Ok(Some((version, description.replace('_', " "))))
}

/// Whether `c` is a control character or an invisible formatting one
/// (Unicode's general categories Cf, Zl and Zp: bidirectional overrides
/// and isolates, zero-width characters, the soft hyphen, tag characters,
/// line and paragraph separators, the byte-order mark): printed as it is,
/// it could end a log line, rewrite a terminal, or make a name read as
/// another.
fn hidden(c: char) -> bool {
    use unicode_general_category::{GeneralCategory, get_general_category};
    c.is_control()
        || matches!(
            get_general_category(c),
            GeneralCategory::Format | GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator
        )
}

/// `name` for printing on one line: a backslash as `\\`, newline, carriage
/// return and tab as `\n`, `\r`, `\t`, any other control or invisible
/// formatting character as `\u{…}` (its code point in hex); everything else
/// as it is. Every file name (and history description) the runner prints
/// goes through it: logs, errors, `status`.
pub fn escape(name: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if hidden(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn checksum(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    Sha256::digest(bytes).iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Reads every revision in `dir`, sorted by version (see the module
/// header for what is refused).
pub fn load_dir(dir: &Path) -> Result<Vec<Revision>, RevisionError> {
    let read_err = |source| RevisionError::Read { path: dir.to_path_buf(), source };
    // The directory's real path: links inside it are judged against it.
    let root = std::fs::canonicalize(dir).map_err(read_err)?;
    let mut revisions: Vec<Revision> = Vec::new();
    for entry in std::fs::read_dir(&root).map_err(read_err)? {
        let entry = entry.map_err(read_err)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((version, description)) = parse_name(&name)? else { continue };
        let bytes = read_revision(&root, &entry.path(), &name)?;
        revisions.push(parse_revision(&name, version, description, &bytes)?);
    }
    revisions.sort_by_key(|r| r.version);
    for pair in revisions.windows(2) {
        if pair[0].version == pair[1].version {
            return Err(RevisionError::Duplicate {
                version: pair[0].version,
                first: pair[0].file.clone(),
                second: pair[1].file.clone(),
            });
        }
    }
    Ok(revisions)
}

/// Reads the revision file `path` (named `name`) in directory `root` (a
/// real path): only when its real path is inside `root`, it is a regular
/// file, and it holds at most [`MAX_REVISION_BYTES`] — by its metadata
/// before reading, and by a reader that stops one byte past the limit.
fn read_revision(root: &Path, path: &Path, name: &str) -> Result<Vec<u8>, RevisionError> {
    use std::io::Read as _;
    let file = escape(name);
    let read_err = |source| RevisionError::Read { path: path.to_path_buf(), source };
    // Follows every link: a link to a link out of the directory is out of it too.
    let real = std::fs::canonicalize(path).map_err(read_err)?;
    if !real.starts_with(root) {
        return Err(RevisionError::Outside { file });
    }
    let too_large = |size| RevisionError::TooLarge { file: file.clone(), size, max: MAX_REVISION_BYTES };
    // Before opening: opening a FIFO named like a revision would wait for a writer.
    let meta = std::fs::metadata(&real).map_err(read_err)?;
    if !meta.is_file() {
        return Err(RevisionError::Content { file, why: "is named like a revision but is not a file" });
    }
    if meta.len() > MAX_REVISION_BYTES {
        return Err(too_large(meta.len()));
    }
    let f = std::fs::File::open(&real).map_err(read_err)?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    f.take(MAX_REVISION_BYTES + 1).read_to_end(&mut bytes).map_err(read_err)?;
    if bytes.len() as u64 > MAX_REVISION_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Builds a revision from its file's bytes.
pub fn parse_revision(file: &str, version: u64, description: String, bytes: &[u8]) -> Result<Revision, RevisionError> {
    let file = &escape(file);
    let text = std::str::from_utf8(bytes)
        .map_err(|_| RevisionError::Content { file: file.to_owned(), why: "not UTF-8 text" })?;
    // A byte-order mark (editors on Windows) is not SQL: the server would refuse the first statement.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut statements = Vec::new();
    for (i, sql) in split(text).into_iter().enumerate() {
        let why = |why: String| RevisionError::Statement { file: file.to_owned(), index: i + 1, why };
        let (kind, tables) = classify(&sql).map_err(why)?;
        statements.push(Statement { sql, kind, tables });
    }
    if statements.is_empty() {
        return Err(RevisionError::Content { file: file.to_owned(), why: "no statement" });
    }
    Ok(Revision {
        version,
        description,
        file: file.to_owned(),
        checksum: checksum(text.replace("\r\n", "\n").as_bytes()),
        raw_checksum: checksum(bytes),
        statements,
    })
}

#[cfg(test)]
mod tests;
