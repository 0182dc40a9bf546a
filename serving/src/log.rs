//! Request values in log lines and error messages.
//!
//! Rule: a value taken from a request (path segment, body field, header)
//! reaches a log line, an error message or a metric label only after it
//! passed its validation (a Kubernetes name, an operationId of
//! `[A-Za-z0-9._:-]{1,128}`); otherwise only as [`invalid`] makes it — a
//! bounded, escaped prefix marked as invalid, with the value's length — so a
//! caller cannot make a line long, split it, reorder how it displays
//! (bidirectional overrides such as U+202E) or forge another line. Metric
//! labels never carry a request value at all, valid or not, unless the
//! value space is closed (a handler name, a status code).

use std::borrow::Cow;
use std::fmt::Write as _;

/// Characters of an invalid value's prefix that reach a log line: enough to
/// recognise what a client sent, few enough that a line stays short (each
/// escaped character takes at most 10 bytes).
pub const INVALID_PREFIX_CHARS: usize = 32;

/// `value` when `valid` (it passed its validation), else [`invalid`]`(value)`.
pub fn checked(value: &str, valid: bool) -> Cow<'_, str> {
    if valid { Cow::Borrowed(value) } else { Cow::Owned(invalid(value)) }
}

/// An invalid request value as a log line or error message may show it:
/// `invalid(<n> bytes):"<escaped prefix>"`, with `...` after the prefix when
/// the value was longer than [`INVALID_PREFIX_CHARS`] characters. At most
/// about 360 bytes, printable ASCII only.
pub fn invalid(value: &str) -> String {
    let mut out = format!("invalid({} bytes):\"", value.len());
    out.push_str(&escape(value, INVALID_PREFIX_CHARS));
    out.push('"');
    out
}

/// `text` with every character outside printable ASCII, and `"` and `\`,
/// escaped as Rust does (`\u{202e}`, `\n`, `\"`), cut after `max_chars`
/// characters of `text` with `...` appended. For messages that may quote a
/// request value (a JSON parser's error, say).
pub fn escape(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars) + 8);
    let mut chars = text.chars();
    for c in chars.by_ref().take(max_chars) {
        if c == ' ' || (c.is_ascii_graphic() && c != '"' && c != '\\') {
            out.push(c);
        } else {
            // `escape_default` writes \t \r \n \" \\ and \u{..} for the rest.
            let _ = write!(out, "{}", c.escape_default());
        }
    }
    if chars.next().is_some() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_values_pass_unchanged() {
        assert_eq!(checked("op-1", true), "op-1");
        assert!(matches!(checked("op-1", true), Cow::Borrowed(_)));
    }

    #[test]
    fn escaping_table() {
        for (raw, escaped) in [
            ("plain text", "plain text"),
            ("\u{202e}evil", "\\u{202e}evil"),
            ("line\nbreak\r", "line\\nbreak\\r"),
            ("quote\"back\\slash", "quote\\\"back\\\\slash"),
            ("tab\tnul\0", "tab\\tnul\\u{0}"),
            ("ünï", "\\u{fc}n\\u{ef}"),
            ("{\"json\":1}", "{\\\"json\\\":1}"),
        ] {
            assert_eq!(escape(raw, 100), escaped, "{raw:?}");
        }
        assert_eq!(escape("abcdef", 3), "abc...");
        assert_eq!(escape("abc", 3), "abc", "no ellipsis at exactly the bound");
    }

    #[test]
    fn a_huge_value_with_a_bidi_override_is_bounded_and_escaped() {
        let raw = format!("{}{}", "\u{202e}", "x".repeat(60 * 1024));
        let shown = invalid(&raw);
        assert!(shown.starts_with(&format!("invalid({} bytes):\"\\u{{202e}}xxx", raw.len())), "{shown}");
        assert!(shown.ends_with("...\""), "{shown}");
        assert!(shown.len() < 400, "{} bytes", shown.len());
        assert!(!shown.contains('\u{202e}'));
        // Worst case: every character escaped to its longest form.
        let worst = invalid(&"\u{10ffff}".repeat(1000));
        assert!(worst.len() < 400, "{} bytes", worst.len());
        assert!(worst.chars().all(|c| c == ' ' || c.is_ascii_graphic()), "{worst}");
    }
}
