//! Decoding one object on its own, with the JSON path of the first field
//! that does not fit the Rust type, and bounding what may reach a log line,
//! a condition or an Event.

use std::fmt::Write as _;

use kube::api::DynamicObject;
use serde::de::DeserializeOwned;

/// Longest decode error kept, in bytes (after escaping). An Event's note
/// holds at most 1 KiB (events.k8s.io/v1), and the condition and the Event
/// add a sentence of advice to it.
pub(crate) const MAX_ERROR_BYTES: usize = 300;

/// Why one stored object does not decode into the operator's type: the JSON
/// path of the field (`spec.sites[0].port`) and serde's complaint, both
/// bounded and escaped ([`bounded`]), so user input never reaches a log
/// line whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text}")]
pub(crate) struct DecodeError {
    /// The path of the offending field, `.` when the object itself is wrong.
    pub path: String,
    /// `<path>: <what serde expected>`, at most [`MAX_ERROR_BYTES`] bytes.
    pub text: String,
}

/// Decodes `obj` into `K`. The error names the JSON path of the first field
/// that does not fit (serde_path_to_error).
pub(crate) fn decode<K: DeserializeOwned>(obj: &DynamicObject) -> Result<K, DecodeError> {
    let value = serde_json::to_value(obj).map_err(|e| error_at(".", &e.to_string()))?;
    serde_path_to_error::deserialize(&value).map_err(|e| {
        let path = e.path().to_string();
        error_at(&path, &e.into_inner().to_string())
    })
}

fn error_at(path: &str, what: &str) -> DecodeError {
    let path = bounded(path, 120);
    let text = bounded(&format!("{path}: {what}"), MAX_ERROR_BYTES);
    DecodeError { path, text }
}

/// `s` made safe for a single log line, condition message or Event: control
/// and bidirectional-formatting characters escaped as `\u{..}`, cut at a
/// character boundary to at most `max_bytes` bytes, with `…` marking a cut.
pub(crate) fn bounded(s: &str, max_bytes: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max_bytes));
    let limit = max_bytes.saturating_sub('…'.len_utf8());
    // Length of `out` after the last whole piece that leaves room for `…`.
    let mut cut_at = 0;
    for c in s.chars() {
        if c.is_control() || is_invisible(c) {
            let _ = write!(out, "{}", c.escape_unicode());
        } else {
            out.push(c);
        }
        if out.len() > max_bytes {
            out.truncate(cut_at);
            out.push('…');
            return out;
        }
        if out.len() <= limit {
            cut_at = out.len();
        }
    }
    out
}

/// Invisible formatting characters (Unicode's general categories Cf, Zl
/// and Zp: bidirectional embeddings, overrides, isolates and marks,
/// zero-width characters, the soft hyphen, tag characters, line and
/// paragraph separators): they reorder what a person reads in a terminal,
/// or make one name read as another.
fn is_invisible(c: char) -> bool {
    use unicode_general_category::{GeneralCategory, get_general_category};
    matches!(
        get_general_category(c),
        GeneralCategory::Format | GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloodraven_api::v1alpha1::{MysqlDatabase, MysqlFailoverGroup};
    use serde_json::json;

    fn group(port: &serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "bloodraven.shipstream.io/v1alpha1",
            "kind": "MysqlFailoverGroup",
            "metadata": {"name": "g", "uid": "u-1", "generation": 1, "resourceVersion": "7"},
            "spec": {
                "sites": [
                    {"name": "iad", "host": "127.0.0.1", "port": port,
                     "credentialsSecretRef": {"namespace": "ns", "name": "creds"}},
                    {"name": "pdx", "host": "127.0.0.1", "port": 3307,
                     "credentialsSecretRef": {"namespace": "ns", "name": "creds"}}
                ],
                "initialActiveSite": "iad",
                "failover": {"probeIntervalSeconds": 1}
            },
            "status": {"conditions": [], "topologyGeneration": 1, "activeSite": "iad"}
        }))
        .unwrap()
    }

    #[test]
    fn a_good_object_decodes() {
        let g: MysqlFailoverGroup = decode(&group(&json!(3306))).unwrap();
        assert_eq!(g.spec.sites[0].port, 3306);
        assert_eq!(g.metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(g.status.unwrap().topology_generation, Some(1));
    }

    #[test]
    fn a_bad_object_names_the_field() {
        for (port, expected) in [
            (json!(70000), "spec.sites[0].port: invalid value: integer `70000`, expected u16"),
            (json!(-1), "spec.sites[0].port: invalid value: integer `-1`, expected u16"),
            (json!("3306"), "spec.sites[0].port: invalid type: string \"3306\", expected u16"),
        ] {
            let err = decode::<MysqlFailoverGroup>(&group(&port)).unwrap_err();
            assert_eq!(err.path, "spec.sites[0].port");
            assert_eq!(err.text, expected);
        }
    }

    #[test]
    fn a_missing_field_names_its_parent() {
        let db: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "bloodraven.shipstream.io/v1alpha1",
            "kind": "MysqlDatabase",
            "metadata": {"name": "d", "namespace": "n"},
            "spec": {"schema": "counter"}
        }))
        .unwrap();
        let err = decode::<MysqlDatabase>(&db).unwrap_err();
        assert_eq!(err.text, "spec: missing field `failoverGroupRef`");
    }

    #[test]
    fn user_text_in_an_error_is_bounded_and_escaped() {
        let hostile = format!("\u{202E}{}\n{}", "9".repeat(30_000), "x".repeat(30_000));
        let err = decode::<MysqlFailoverGroup>(&group(&json!(hostile))).unwrap_err();
        assert!(err.text.starts_with("spec.sites[0].port: invalid type: string \"\\u{202e}999"), "{}", err.text);
        assert!(err.text.len() <= MAX_ERROR_BYTES && err.text.ends_with('…'), "{}", err.text);
        assert!(!err.text.contains('\u{202E}') && !err.text.contains('\n'));
        let long = format!("{}\u{202E}\n{}", "a".repeat(400), "b".repeat(400));
        let cut = bounded(&long, MAX_ERROR_BYTES);
        assert!(cut.len() <= MAX_ERROR_BYTES, "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert_eq!(bounded("x\u{202E}y\nz", 100), "x\\u{202e}y\\u{a}z");
        assert_eq!(bounded("a\u{ad}b\u{200b}c\u{e0001}", 100), "a\\u{ad}b\\u{200b}c\\u{e0001}");
        assert_eq!(bounded("short", 100), "short");
        assert_eq!(bounded("héllo", 5), "h…");
    }
}
