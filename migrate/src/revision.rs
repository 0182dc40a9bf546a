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

/// Splits SQL text into statements on `;` outside quotes and comments.
/// Comments are kept inside a statement (`/*! … */` executable comments
/// must reach the server); a piece that is only comments is dropped.
pub fn split(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"' | b'`') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    // A backslash escapes inside string literals (not in identifiers).
                    if b[i] == b'\\' && q != b'`' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'#' => i = line_end(b, i),
            b'-' if b.get(i + 1) == Some(&b'-') && b.get(i + 2).is_none_or(u8::is_ascii_whitespace) => {
                i = line_end(b, i);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
            }
            b';' => {
                push(&mut out, &text[start..i]);
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    if start < b.len() {
        push(&mut out, &text[start..]);
    }
    out
}

fn line_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i] != b'\n' {
        i += 1;
    }
    i
}

fn push(out: &mut Vec<String>, piece: &str) {
    let piece = piece.trim();
    if !words(piece).is_empty() {
        out.push(piece.to_owned());
    }
}

/// The statement's words outside comments and string literals: keywords
/// and identifiers (backticks removed), uppercased keywords kept as written.
fn words(sql: &str) -> Vec<String> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'\'' || c == b'"' {
            i += 1;
            while i < b.len() && b[i] != c {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push("'".into());
        } else if c == b'#' || (c == b'-' && b.get(i + 1) == Some(&b'-')) {
            i = line_end(b, i);
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') && !executable(b, i) {
            i += 2;
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                i += 1;
            }
            i += 2;
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            // `/*!NNNNN …` (MySQL, MariaDB) or `/*M!NNNNN …` (MariaDB only)
            // executable comment: the server runs it, so its words count.
            i += if b.get(i + 2) == Some(&b'M') { 4 } else { 3 };
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        } else if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.' | b'`') {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'_' | b'$' | b'.' | b'`')) {
                if b[i] == b'`' {
                    // `schema`.`table`: keep going through the quoted part.
                    i += 1;
                    while i < b.len() && b[i] != b'`' {
                        i += 1;
                    }
                }
                i += 1;
            }
            out.push(sql[s..i.min(b.len())].replace('`', ""));
        } else if c.is_ascii() {
            if matches!(c, b',' | b'(' | b')' | b'=') {
                out.push((c as char).to_string());
            }
            i += 1;
        } else {
            i += 1;
        }
    }
    out
}

/// Whether the comment at `i` (`/*`) is executable: `/*!` or `/*M!`.
fn executable(b: &[u8], i: usize) -> bool {
    b.get(i + 2) == Some(&b'!') || (b.get(i + 2) == Some(&b'M') && b.get(i + 3) == Some(&b'!'))
}

/// The tables a DDL statement names (empty for DML or unknown shapes):
/// used on another session's query text in the lock-wait graph.
pub fn tables_named(sql: &str) -> Vec<TableRef> {
    let w = words(sql);
    let up: Vec<String> = w.iter().map(|s| s.to_ascii_uppercase()).collect();
    ddl_tables(&w, &up)
}

/// Session variables the runner owns: a revision that sets them would
/// change the transaction the runner commits (`autocommit`,
/// `completion_type`) or the lock and idle bounds of every later
/// statement and revision of the run.
const OWNED_VARIABLES: [&str; 7] = [
    "autocommit",
    "completion_type",
    "lock_wait_timeout",
    "innodb_lock_wait_timeout",
    "wait_timeout",
    "net_read_timeout",
    "net_write_timeout",
];

/// DML or DDL, and for DDL the tables it names; an error for statements
/// the runner refuses.
fn classify(sql: &str) -> Result<(Kind, Vec<TableRef>), String> {
    let w = words(sql);
    let up: Vec<String> = w.iter().map(|s| s.to_ascii_uppercase()).collect();
    classify_words(&w, &up)
}

fn classify_words(w: &[String], up: &[String]) -> Result<(Kind, Vec<TableRef>), String> {
    let at = |i: usize| up.get(i).map_or("", String::as_str);
    if at(0) == "SET"
        && let Some(v) = w.iter().find_map(|x| {
            // `@@session.autocommit` reads as `session.autocommit`.
            let name = x.rsplit('.').next().unwrap_or(x).to_ascii_lowercase();
            OWNED_VARIABLES.contains(&name.as_str()).then_some(name)
        })
    {
        return Err(format!(
            "SET {v}: the runner owns this session setting (its transaction, lock and idle bounds) for every revision; remove it (--lock-timeout sets the lock waits)"
        ));
    }
    match at(0) {
        "DELIMITER" => {
            return Err("DELIMITER is a client command, not SQL; write one statement per `;` (stored programs are not supported in revisions)".into());
        }
        "BEGIN" | "COMMIT" | "ROLLBACK" | "SAVEPOINT" | "RELEASE" | "XA" => {
            return Err(format!(
                "{} is transaction control; the runner commits each revision with its history row itself — remove it",
                at(0)
            ));
        }
        "START" if at(1) == "TRANSACTION" => {
            return Err("START TRANSACTION is transaction control; the runner commits each revision with its history row itself — remove it".into());
        }
        "USE" => {
            return Err("USE changes the schema of the runner's session, where it writes the history; qualify the table names instead (schema.table)".into());
        }
        "SET" if at(1) == "STATEMENT" => {
            // MariaDB `SET STATEMENT var = value [, …] FOR <statement>`: the inner statement decides.
            return match up.iter().position(|u| u == "FOR") {
                Some(p) if p + 1 < up.len() => classify_words(&w[p + 1..], &up[p + 1..]),
                _ => Err("SET STATEMENT without FOR <statement>".into()),
            };
        }
        "SET" if up.iter().any(|u| u == "AUTOCOMMIT" || u == "@@AUTOCOMMIT" || u == "TRANSACTION") => {
            return Err("SET autocommit / SET TRANSACTION change the runner's transaction; remove it".into());
        }
        // Account statements commit implicitly, though they start with SET.
        "SET" if matches!(at(1), "PASSWORD" | "DEFAULT") => return Ok((Kind::Ddl, vec![])),
        "INSERT" | "UPDATE" | "DELETE" | "REPLACE" | "SELECT" | "WITH" | "DO" | "SET" => {
            return Ok((Kind::Dml, vec![]));
        }
        "CREATE" => {
            let program = up[1..].iter().find(|u| {
                matches!(
                    u.as_str(),
                    "TABLE" | "INDEX" | "VIEW" | "DATABASE" | "SCHEMA" | "PROCEDURE" | "FUNCTION" | "TRIGGER" | "EVENT"
                )
            });
            if let Some(kind) = program.filter(|k| matches!(k.as_str(), "PROCEDURE" | "FUNCTION" | "TRIGGER" | "EVENT"))
                && up.iter().any(|u| u == "BEGIN")
            {
                return Err(format!(
                    "CREATE {kind} with a BEGIN … END body: the runner splits on `;` and would send the body in pieces; \
                     stored programs with compound bodies are not supported in revisions (a one-statement body without BEGIN is)"
                ));
            }
        }
        _ => {}
    }
    Ok((Kind::Ddl, ddl_tables(w, up)))
}

/// The tables a DDL statement names, for the blocker look.
fn ddl_tables(w: &[String], up: &[String]) -> Vec<TableRef> {
    let name = |s: &str| match s.split_once('.') {
        Some((schema, table)) => (Some(schema.to_owned()), table.to_owned()),
        None => (None, s.to_owned()),
    };
    let skip = |mut i: usize, words: &[&str]| {
        while up.get(i).is_some_and(|u| words.contains(&u.as_str())) {
            i += 1;
        }
        i
    };
    let ident = |i: usize| w.get(i).filter(|s| !matches!(s.as_str(), "," | "(" | ")" | "=" | "'")).map(|s| name(s));
    let mut tables = Vec::new();
    // `… ON table` (CREATE INDEX, DROP INDEX, CREATE TRIGGER).
    let on = |tables: &mut Vec<_>| {
        if let Some(i) = up.iter().position(|u| u == "ON")
            && let Some(t) = ident(i + 1)
        {
            tables.push(t);
        }
    };
    match up.first().map(String::as_str) {
        Some("ALTER") => {
            let i = skip(1, &["ONLINE", "IGNORE"]);
            if up.get(i).map(String::as_str) == Some("TABLE") {
                tables.extend(ident(skip(i + 1, &["IF", "EXISTS"])));
            }
        }
        Some("TRUNCATE") => tables.extend(ident(skip(1, &["TABLE"]))),
        Some("CREATE") => {
            let i = skip(1, &["OR", "REPLACE", "TEMPORARY", "UNIQUE", "FULLTEXT", "SPATIAL", "ONLINE", "OFFLINE"]);
            match up.get(i).map(String::as_str) {
                Some("TABLE") => tables.extend(ident(skip(i + 1, &["IF", "NOT", "EXISTS"]))),
                Some("INDEX" | "TRIGGER") => on(&mut tables),
                _ => {}
            }
        }
        Some("DROP") => {
            let i = skip(1, &["TEMPORARY"]);
            match up.get(i).map(String::as_str) {
                Some("TABLE" | "TABLES") => {
                    let mut j = skip(i + 1, &["IF", "EXISTS"]);
                    while let Some(t) = ident(j) {
                        tables.push(t);
                        if w.get(j + 1).map(String::as_str) != Some(",") {
                            break;
                        }
                        j += 2;
                    }
                }
                Some("INDEX") => on(&mut tables),
                _ => {}
            }
        }
        Some("RENAME") if up.get(1).is_some_and(|u| u == "TABLE" || u == "TABLES") => {
            // RENAME TABLE a TO b, c TO d: every name counts.
            let mut j = 2;
            while let Some(t) = ident(j) {
                if up.get(j).is_some_and(|u| u == "TO") {
                    j += 1;
                    continue;
                }
                tables.push(t);
                j += 1;
                if w.get(j).map(String::as_str) == Some(",") {
                    j += 1;
                }
            }
        }
        _ => {}
    }
    tables
}

#[cfg(test)]
mod tests;
