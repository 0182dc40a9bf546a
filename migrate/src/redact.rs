//! Secrets kept out of everything the runner prints.
//!
//! Model: the runner reads two secrets, once, in
//! [`crate::db::Target::from_args`] — the database password (from the URL,
//! as written and percent-decoded) and the password file's text — and
//! registers them here ([`register`]). Every driver error, the server's
//! included, is rendered in one place, [`crate::classify::describe`], which
//! calls [`redact`]; so do the other sessions' queries the log quotes
//! ([`crate::blockers::one_line`]) and the URL parser's messages. A server
//! error quotes text the runner sent (`ERROR 1064 … near '…'`), so a
//! revision that holds a secret — a link to the password file, a pasted
//! URL — would otherwise print it.
//!
//! Rules, in order:
//! 1. every occurrence of a registered secret, and every run of at least
//!    [`FRAGMENT`] characters that is part of one, becomes
//!    [`REDACTED`]: the servers cut a quoted statement at 80 characters
//!    (`%-.80s`), so a long secret may be shown cut at either end;
//! 2. the text after the first `IDENTIFIED` or `PASSWORD` is cut (`CREATE
//!    USER … IDENTIFIED BY '…'`, `SET PASSWORD`): a password the runner
//!    never read, written in a revision or in another session's query.
//!    Quotes in a server message nest, so no finer cut is safe.
//!
//! Over-redaction is the safe failure: text that shares [`FRAGMENT`]
//! characters with the password (the account name, when the password
//! starts with it) is redacted too, and a password of one or two
//! characters garbles every message.
//!
//! Why a process-wide list: driver errors are rendered by `Display`
//! implementations that have no context to pass a secret through
//! (`DbError::Query`, `?` from deep in a run); a list that is only
//! appended to, read where text is rendered, covers every path at once,
//! including the ones written later.

use std::sync::RwLock;

/// What a secret is replaced with.
pub const REDACTED: &str = "…(redacted)";

/// The shortest part of a secret (characters) that is redacted on its own.
pub const FRAGMENT: usize = 6;

static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Adds `secret` to what [`redact`] removes (an empty one is ignored).
pub fn register(secret: &str) {
    if secret.is_empty() {
        return;
    }
    let mut list = SECRETS.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !list.iter().any(|s| s == secret) {
        list.push(secret.to_owned());
    }
}

/// `text` without the registered secrets and without what follows
/// `IDENTIFIED` or `PASSWORD` (see the module header).
pub fn redact(text: &str) -> String {
    let secrets = SECRETS.read().unwrap_or_else(std::sync::PoisonError::into_inner);
    cut_keywords(&cut_secrets(text, &secrets))
}

/// Rule 1 with the secrets given.
fn cut_secrets(text: &str, secrets: &[String]) -> String {
    if secrets.is_empty() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < text.len() {
        let rest = &text[at..];
        let longest = secrets.iter().map(|s| secret_at(rest, s)).max().unwrap_or(0);
        if longest > 0 {
            out.push_str(REDACTED);
            at += longest;
        } else {
            let c = rest.chars().next().unwrap_or_default();
            out.push(c);
            at += c.len_utf8().max(1);
        }
    }
    out
}

/// The length in bytes of the longest start of `rest` that is all of
/// `secret`, or a part of it at least [`FRAGMENT`] characters long; 0
/// when there is none.
fn secret_at(rest: &str, secret: &str) -> usize {
    let mut best = 0;
    for (chars, (i, c)) in rest.char_indices().enumerate() {
        let end = i + c.len_utf8();
        let part = &rest[..end];
        if !secret.contains(part) {
            break;
        }
        if chars + 1 >= FRAGMENT || part.len() == secret.len() {
            best = end;
        }
    }
    best
}

/// Rule 2.
fn cut_keywords(text: &str) -> String {
    let up = text.to_ascii_uppercase();
    let cut = ["IDENTIFIED", "PASSWORD"].iter().filter_map(|k| up.find(k).map(|i| i + k.len())).min();
    match cut {
        Some(i) => format!("{} {REDACTED}", &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attack_passwords_in_other_sessions_queries_and_server_messages_are_cut() {
        for text in [
            "CREATE USER 'x'@'%' IDENTIFIED BY 'hunter2-secret'",
            "ALTER USER x IDENTIFIED VIA mysql_native_password USING PASSWORD(\"hunter2-secret\")",
            "SET PASSWORD FOR 'x'@'%' = 'hunter2-secret'",
            "You have an error in your SQL syntax; near 'IDENTIFIED BY 'hunter2-secret'' at line 1",
        ] {
            let r = redact(text);
            assert!(!r.contains("hunter2") && r.contains("(redacted)"), "{r}");
        }
        assert_eq!(redact("SELECT * FROM orders"), "SELECT * FROM orders");
    }

    #[test]
    fn attack_a_secret_is_cut_whole_and_in_the_pieces_a_server_quote_leaves() {
        let secrets = vec!["Zq7-long-secret-Kx9w".to_owned(), "ab".to_owned()];
        let table = [
            // whole, twice, in a 1064 message quoting a linked password file
            (
                "ERROR 1064 (42000): You have an error in your SQL syntax; near 'Zq7-long-secret-Kx9w' at line 1",
                "ERROR 1064 (42000): You have an error in your SQL syntax; near '…(redacted)' at line 1",
            ),
            ("Zq7-long-secret-Kx9w Zq7-long-secret-Kx9w", "…(redacted) …(redacted)"),
            // cut at the end (a quote cut at 80 characters) and at the start
            ("near 'mysql://m:Zq7-long-se' at line 1", "near 'mysql://m:…(redacted)' at line 1"),
            ("near 'ong-secret-Kx9w@db:3306/app' at", "near '…(redacted)@db:3306/app' at"),
            // a short secret only whole; a short piece of a long one stays
            ("ab abc", "…(redacted) …(redacted)c"),
            ("Zq7-lo", "…(redacted)"),
            ("Zq7-l", "Zq7-l"),
            // multi-byte text around it
            ("é Zq7-long-secret-Kx9w ü", "é …(redacted) ü"),
        ];
        for (text, want) in table {
            assert_eq!(cut_secrets(text, &secrets), want, "{text}");
        }
        assert_eq!(cut_secrets("anything", &[]), "anything");
    }

    #[test]
    fn a_registered_secret_is_redacted_from_every_rendered_text() {
        register("R3gistered-Pw-0192");
        register("");
        let r = redact("near 'mysql://migrator:R3gistered-Pw-0192@db:3306/app' at line 1");
        assert!(!r.contains("R3gistered") && !r.contains("Pw-0192"), "{r}");
        assert!(r.contains("mysql://migrator:") && r.contains("@db:3306/app"), "{r}");
    }
}
