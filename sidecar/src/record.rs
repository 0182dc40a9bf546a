//! The records a run leaves: the final record (termination message and one
//! JSON line on standard output), and `hold`'s state file, which tells a
//! restarted sidecar that this Pod's run already began (so it never
//! acquires again). Neither ever holds a token.

use std::io::Write as _;
use std::path::Path;

/// The rule for text that comes from outside (server messages, the
/// migration's reports): cut and escaped, shared with the socket's contract.
pub use bloodraven_api::socket::bounded;
use serde::{Deserialize, Serialize};

/// Kubernetes reads at most 4096 bytes of a termination message.
pub const TERMINATION_MESSAGE_MAX: usize = 4096;

/// The final state of a run, as the termination message and the last log
/// line carry it. Field names follow the deploy API's (camelCase).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalRecord {
    /// Always `bloodraven-sidecar` (to find the line among others).
    pub record: String,
    /// The operationId.
    pub operation_id: String,
    /// The group.
    pub group: String,
    /// The MysqlDatabase name.
    pub instance: String,
    /// `succeeded`, `failed`, `not-started`, `fenced`, `schema-verification-required`.
    pub result: String,
    /// The exit code `run`/`exec` end with.
    pub exit_code: i32,
    /// The last `ddlState` (`before`, `started`, `completed`, `failed`).
    pub ddl_state: String,
    /// The revision the migration last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The outcome the migration reported (`succeeded`, `failed`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// The last error (the migration's reported one, or the fence's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Fence reason code (`revoked`, `expired`, `deadline_passed`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<String>,
    /// The holder that kept the mutex, when acquisition gave up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Whether the final `ddlState` reached the Lease (a renewal carried it).
    pub recorded_on_lease: bool,
    /// For a person.
    pub message: String,
}

impl FinalRecord {
    /// The record of a run that ended before it asked for any lease: bad
    /// flags or settings (exit 2, `usage-error`), or a sidecar that could
    /// not start (exit 94, `sidecar-failed`). Every exit prints a record, so
    /// a pipeline that parses the line always finds one. `lease` gives the
    /// run's names, as far as they were given.
    pub fn not_run(exit_code: i32, message: &str, lease: Option<&crate::config::LeaseArgs>) -> FinalRecord {
        let result = if exit_code == crate::lease::ending::exit::USAGE { "usage-error" } else { "sidecar-failed" };
        FinalRecord {
            record: "bloodraven-sidecar".into(),
            // The operationId the run would have used: given, or the Job's UID.
            operation_id: lease
                .and_then(|l| l.operation_id.clone().or_else(|| l.job_uid.clone().filter(|u| !u.is_empty())))
                .map(|op| bounded(&op, 128))
                .unwrap_or_default(),
            group: lease.map(|l| l.group.clone()).unwrap_or_default(),
            instance: lease.map(|l| l.instance.clone()).unwrap_or_default(),
            result: result.into(),
            exit_code,
            ddl_state: "before".into(),
            message: bounded(message, 1024),
            ..FinalRecord::default()
        }
    }

    /// The record as JSON within [`TERMINATION_MESSAGE_MAX`] bytes (the
    /// message and last error are shortened when needed).
    pub fn to_json(&self) -> String {
        let mut r = self.clone();
        loop {
            let text = serde_json::to_string(&r).unwrap_or_default();
            if text.len() <= TERMINATION_MESSAGE_MAX || (r.message.len() < 64 && r.last_error.is_none()) {
                return text;
            }
            r.last_error = r.last_error.filter(|e| e.len() > 64).map(|e| bounded(&e, e.chars().count() / 2));
            r.message = bounded(&r.message, r.message.chars().count() / 2);
        }
    }

    /// Writes the termination message (`path`, usually
    /// `/dev/termination-log`) and the JSON line on standard output. A
    /// termination message that cannot be written (no such file outside a
    /// Pod) is a warning, never a failure: the line is still printed.
    pub fn publish(&self, path: Option<&Path>) {
        let text = self.to_json();
        if let Some(path) = path
            && let Err(e) = std::fs::write(path, &text)
        {
            tracing::warn!(path = %path.display(), error = %e, "failed to write the termination message");
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }
}

/// Phases `hold` writes to its state file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Asking for the leases.
    Acquiring,
    /// Both leases held.
    Held,
    /// Ended (the verdict is in the record).
    Ended,
}

/// `hold`'s state file: where a run stands, without any token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// The operation.
    pub operation_id: String,
    /// Where it stands.
    pub phase: Phase,
    /// Whether DDL was in flight at the last write.
    pub in_ddl: bool,
    /// The revision last reported.
    #[serde(default)]
    pub revision: Option<String>,
    /// The final record, once ended.
    #[serde(default)]
    pub record: Option<FinalRecord>,
}

/// Reads the state file; `Ok(None)` when there is none.
pub fn read_state(path: &Path) -> std::io::Result<Option<State>> {
    match crate::client::read_bounded(path, 1024 * 1024) {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).map(Some).map_err(std::io::Error::other),
        Ok(None) => Err(std::io::Error::other("larger than 1 MiB: not a state file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes the state file atomically (a temporary file beside it, renamed).
pub fn write_state(path: &Path, state: &State) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(&serde_json::to_vec(state).map_err(std::io::Error::other)?)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_refused_at_start_names_the_operation_it_would_have_been() {
        use clap::Parser as _;
        #[derive(Debug, clap::Parser)]
        struct T {
            #[command(flatten)]
            lease: crate::config::LeaseArgs,
        }
        let parse = |extra: &[&str]| {
            let mut args =
                vec!["t", "--url", "https://h:8443", "--ca", "/ca", "--group", "g", "--instance", "counter-app"];
            args.extend_from_slice(extra);
            T::try_parse_from(args).unwrap().lease
        };
        let r = FinalRecord::not_run(2, "refusing to start: bad TTL", Some(&parse(&["--job-uid", "2f6c"])));
        assert_eq!((r.operation_id.as_str(), r.result.as_str(), r.exit_code), ("2f6c", "usage-error", 2));
        let r = FinalRecord::not_run(2, "x", Some(&parse(&["--job-uid", "2f6c", "--operation-id", "op-1"])));
        assert_eq!(r.operation_id, "op-1", "a given operationId wins, as it does for the leases");
        assert_eq!(FinalRecord::not_run(2, "x", Some(&parse(&[]))).operation_id, "");
    }

    #[test]
    fn bounded_escapes_and_cuts() {
        assert_eq!(bounded("plain", 10), "plain");
        assert_eq!(bounded("a\nb\u{202e}", 10), "a\\nb\\u{202e}");
        assert_eq!(bounded("abcdef", 3), "abc...");
    }

    #[test]
    fn termination_message_fits() {
        let r = FinalRecord {
            message: "m".repeat(10_000),
            last_error: Some("e".repeat(10_000)),
            operation_id: "op".into(),
            ..FinalRecord::default()
        };
        let text = r.to_json();
        assert!(text.len() <= TERMINATION_MESSAGE_MAX, "{}", text.len());
        let back: FinalRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back.operation_id, "op");
    }

    #[test]
    fn state_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert!(read_state(&path).unwrap().is_none());
        let s = State {
            operation_id: "op".into(),
            phase: Phase::Held,
            in_ddl: true,
            revision: Some("3".into()),
            record: None,
        };
        write_state(&path, &s).unwrap();
        assert_eq!(read_state(&path).unwrap(), Some(s));
        std::fs::write(&path, b"garbage").unwrap();
        assert!(read_state(&path).is_err());
    }
}
