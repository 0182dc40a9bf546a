//! The runner's side of the sidecar's local socket (docs/sidecar.md, "The
//! local socket"; the wire types and the calling side are the contract's,
//! `bloodraven_api::socket`, which the sidecar serves).
//!
//! - Detection: `--socket`/`BLOODRAVEN_SOCKET` (set by `bloodraven-sidecar
//!   run` for its child), else `/run/bloodraven/sidecar.sock` when it or
//!   its directory (the emptyDir an injected Job mounts) exists. Then the
//!   runner is *guarded*: it touches the database only after a granted
//!   `permit`, and refuses to start when the sidecar cannot vouch for a
//!   live lease (no answer, or refused). Otherwise it runs *alone* — a
//!   person running it by hand — and says so in its first log line.
//! - Before each revision: `permit`; refused means fenced (or the run is
//!   over): stop at once.
//! - A DDL revision: `mark ddl-started --revision V` before its first
//!   statement (answered once a renewal carrying `ddlState: started` was
//!   confirmed, so the operator knows before the DDL is sent), and
//!   `mark ddl-finished --revision V` once its history row says applied.
//! - At the end: `mark outcome succeeded|failed --revision V [--error E]`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bloodraven_api::socket::client::call;
use bloodraven_api::socket::{MarkEvent, OutcomeResult, Reply, Request};

/// The injected Job's emptyDir and the socket in it.
pub use bloodraven_api::socket::DEFAULT_SOCKET;

/// How long a `permit` or `outcome` may take.
const QUICK: Duration = Duration::from_secs(10);

/// How long a `mark` may take: the sidecar answers once a renewal
/// carrying the new state was confirmed (it gives up after 60 s).
const MARK: Duration = Duration::from_secs(75);

/// Why the sidecar did not let the runner go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    /// The sidecar refused: fenced, not yet held, or over.
    #[error("the sidecar refused: {0}")]
    Refused(String),
    /// The sidecar could not be asked.
    #[error("the sidecar at {path} did not vouch for a live lease: {message}")]
    Unreachable {
        /// The socket.
        path: String,
        /// What went wrong.
        message: String,
    },
}

/// Alone or behind the sidecar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Guard {
    /// No sidecar: a person runs it by hand.
    Alone,
    /// Behind the sidecar at this socket.
    Sidecar(PathBuf),
}

impl Guard {
    /// Detects the mode (see the module header). `default` is
    /// [`DEFAULT_SOCKET`] outside tests.
    pub fn detect(flag: Option<&Path>, default: &Path) -> Guard {
        if let Some(p) = flag {
            return Guard::Sidecar(p.to_path_buf());
        }
        let dir_exists = default.parent().is_some_and(Path::exists);
        if default.exists() || dir_exists { Guard::Sidecar(default.to_path_buf()) } else { Guard::Alone }
    }

    fn unreachable(path: &Path, message: String) -> GuardError {
        GuardError::Unreachable { path: path.display().to_string(), message }
    }

    /// `permit`: Ok with the ms left before the fence deadline (alone: `None`).
    pub async fn permit(&self) -> Result<Option<u64>, GuardError> {
        let Guard::Sidecar(path) = self else { return Ok(None) };
        match call(path, &Request::Permit, QUICK).await {
            Ok(Reply::Permit { granted: true, remaining_ms, .. }) => Ok(Some(remaining_ms)),
            Ok(Reply::Permit { message, .. }) => Err(GuardError::Refused(message)),
            Ok(other) => Err(Self::unreachable(path, format!("unexpected reply {other:?}"))),
            Err(e) => Err(Self::unreachable(path, e)),
        }
    }

    /// `mark ddl-started|ddl-finished --revision V`.
    pub async fn mark(&self, event: MarkEvent, version: u64) -> Result<(), GuardError> {
        let Guard::Sidecar(path) = self else { return Ok(()) };
        let req = Request::Mark { event, revision: Some(version.to_string()) };
        match call(path, &req, MARK).await {
            Ok(Reply::Ok) => Ok(()),
            Ok(Reply::Error { message }) => Err(GuardError::Refused(message)),
            Ok(other) => Err(Self::unreachable(path, format!("unexpected reply {other:?}"))),
            Err(e) => Err(Self::unreachable(path, e)),
        }
    }

    /// `mark outcome`; a failure to report is logged, not fatal (the
    /// sidecar records the process's exit either way).
    pub async fn outcome(&self, succeeded: bool, version: Option<u64>, error: Option<String>) {
        let Guard::Sidecar(path) = self else { return };
        let result = if succeeded { OutcomeResult::Succeeded } else { OutcomeResult::Failed };
        let req = Request::Outcome { result, revision: version.map(|v| v.to_string()), error };
        match call(path, &req, QUICK).await {
            Ok(Reply::Ok) => {}
            Ok(other) => tracing::warn!(reply = ?other, "the sidecar did not take the outcome"),
            Err(e) => tracing::warn!(error = %e, "failed to report the outcome to the sidecar"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection() {
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("given.sock");
        assert_eq!(Guard::detect(Some(&flag), Path::new("/nonexistent/x.sock")), Guard::Sidecar(flag));
        assert_eq!(Guard::detect(None, Path::new("/nonexistent-bloodraven/sidecar.sock")), Guard::Alone);
        // The injected emptyDir exists but the sidecar never bound: guarded (and so refused later).
        let default = dir.path().join("sidecar.sock");
        assert_eq!(Guard::detect(None, &default), Guard::Sidecar(default.clone()));
    }

    #[tokio::test]
    async fn a_missing_sidecar_is_not_a_permit() {
        let dir = tempfile::tempdir().unwrap();
        let g = Guard::Sidecar(dir.path().join("none.sock"));
        let e = g.permit().await.unwrap_err();
        assert!(matches!(e, GuardError::Unreachable { .. }), "{e}");
        assert_eq!(Guard::Alone.permit().await, Ok(None));
    }
}
