//! kubectl's output conventions: upper-case column headers padded with
//! spaces, `-o json|yaml` for machines, colour only on a terminal (and
//! never with `NO_COLOR`), progress on standard error. Text that came from
//! objects is printed with control characters escaped, so a name or a
//! message cannot move the cursor or recolour the terminal.

use std::fmt::Write as _;
use std::io::IsTerminal as _;

use serde::Serialize;

/// `-o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Json,
    Yaml,
}

/// `value` as `format`, ending in a newline.
pub(crate) fn render_as<T: Serialize>(value: &T, format: Format) -> anyhow::Result<String> {
    Ok(match format {
        Format::Json => serde_json::to_string_pretty(value)? + "\n",
        Format::Yaml => serde_saphyr::to_string(value)?,
    })
}

/// `s` with every control character (C0, DEL, C1) and every invisible
/// formatting character (bidi overrides and isolates, zero-width
/// characters, line and paragraph separators) written as `\u{..}`: text
/// from objects can neither drive the terminal nor read differently from
/// what it is.
pub(crate) fn printable(s: &str) -> String {
    use unicode_general_category::{GeneralCategory, get_general_category};
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let hidden = matches!(
            get_general_category(c),
            GeneralCategory::Format | GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator
        );
        if (c.is_control() && c != '\n') || hidden {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// One line of `s`: newlines too are escaped (a table cell).
pub(crate) fn cell(s: &str) -> String {
    printable(s).replace('\n', "\\n")
}

/// Colours, when standard output is a terminal and `NO_COLOR` is unset.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Paint(bool);

impl Paint {
    pub fn stdout() -> Paint {
        Paint(std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none())
    }

    fn wrap(self, code: &str, s: &str) -> String {
        if self.0 { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_owned() }
    }

    pub fn good(self, s: &str) -> String {
        self.wrap("32", s)
    }

    pub fn bad(self, s: &str) -> String {
        self.wrap("31", s)
    }

    pub fn warn(self, s: &str) -> String {
        self.wrap("33", s)
    }

    pub fn bold(self, s: &str) -> String {
        self.wrap("1", s)
    }

    /// The visible width of a cell painted by this (escapes excluded).
    fn width(s: &str) -> usize {
        let mut n = 0;
        let mut in_escape = false;
        for c in s.chars() {
            match (in_escape, c) {
                (false, '\x1b') => in_escape = true,
                (true, 'm') => in_escape = false,
                (true, _) => {}
                (false, _) => n += 1,
            }
        }
        n
    }
}

/// A table as kubectl prints one: headers in capitals, columns three
/// spaces apart, the last column unpadded.
#[derive(Debug, Default)]
pub(crate) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table { rows: vec![headers.iter().map(|h| (*h).to_owned()).collect()] }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.len() <= 1
    }

    /// The table, `indent` spaces in.
    pub fn render(&self, indent: usize) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|i| self.rows.iter().filter_map(|r| r.get(i)).map(|c| Paint::width(c)).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = " ".repeat(indent);
            for (i, c) in row.iter().enumerate() {
                line.push_str(c);
                if i + 1 < row.len() {
                    line.push_str(&" ".repeat(widths[i] - Paint::width(c) + 3));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// An age or a time left as kubectl prints them: `45s`, `3m12s`, `5h`, `4d`.
pub(crate) fn short_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..120 => format!("{s}s"),
        120..600 => format!("{}m{}s", s / 60, s % 60),
        600..10_800 => format!("{}m", s / 60),
        10_800..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("a\x1b[2Jb\u{9b}c\r"), "a\\u{1b}[2Jb\\u{9b}c\\u{d}");
        assert_eq!(cell("two\nlines"), "two\\nlines");
        assert_eq!(printable("plain words, ünïcode → pdx — ok"), "plain words, ünïcode → pdx — ok");
        assert_eq!(printable("gpj\u{202e}exe\u{200b}\u{2028}"), "gpj\\u{202e}exe\\u{200b}\\u{2028}");
    }

    #[test]
    fn tables_align_painted_cells_by_what_shows() {
        let mut t = Table::new(&["SITE", "REACHABLE", "LAG"]);
        t.row(vec!["iad".into(), Paint(true).good("true"), "0s".into()]);
        t.row(vec!["pdx-long".into(), "false".into(), String::new()]);
        let out = t.render(2);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "  SITE       REACHABLE   LAG");
        assert_eq!(lines[1], "  iad        \x1b[32mtrue\x1b[0m        0s");
        assert_eq!(lines[2], "  pdx-long   false");
    }

    #[test]
    fn durations_read_like_kubectl() {
        assert_eq!(short_duration(-3), "0s");
        assert_eq!(short_duration(45), "45s");
        assert_eq!(short_duration(192), "3m12s");
        assert_eq!(short_duration(900), "15m");
        assert_eq!(short_duration(5 * 3600), "5h");
        assert_eq!(short_duration(4 * 86_400), "4d");
    }
}
