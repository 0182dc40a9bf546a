//! The statement splitter and classifier of a revision: SQL text cut
//! into statements on `;` outside quotes and comments, each read as DML
//! or DDL (with the tables a DDL statement names), and the statements the
//! runner refuses (`DELIMITER`, transaction control, the session variables
//! it owns).

use super::{Kind, TableRef};

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
pub(super) fn classify(sql: &str) -> Result<(Kind, Vec<TableRef>), String> {
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
