//! The sidecar's local socket, typed once for both ends: the sidecar
//! serves it (`bloodraven-sidecar hold` and `run`), and its own `exec`,
//! `mark`, `permit` and `probe` modes and the migration runner
//! (`bloodraven-migrate`) call it (docs/sidecar.md, "The local socket").
//!
//! A unix stream socket in a directory only the Pod's containers mount (an
//! emptyDir, [`DEFAULT_SOCKET`]), one JSON object per line each way: a
//! [`Request`] line from the caller, [`Reply`] lines back. Lines are at
//! most [`MAX_LINE`] bytes. The socket never hands out a token.
//!
//! This module is pure; [`client`] (feature `socket-client`) is the one
//! piece of I/O: connect, send one request, read one reply line.

use serde::{Deserialize, Serialize};

/// Longest request line, in bytes.
pub const MAX_LINE: usize = 4096;

/// Where `hold` serves the socket and where the wrapper and the runner look
/// for it: in the emptyDir the webhook mounts at `/run/bloodraven`
/// ([`crate::names::inject::RUN_DIR`]).
pub const DEFAULT_SOCKET: &str = "/run/bloodraven/sidecar.sock";

/// A report's event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum MarkEvent {
    /// The migration is about to send DDL.
    DdlStarted,
    /// Its DDL (of one revision) committed.
    DdlFinished,
}

/// The migration's own view of how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum OutcomeResult {
    /// It applied everything.
    Succeeded,
    /// It failed.
    Failed,
}

impl OutcomeResult {
    /// The JSON spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            OutcomeResult::Succeeded => "succeeded",
            OutcomeResult::Failed => "failed",
        }
    }
}

/// A request line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Request {
    /// Where the run stands.
    Status,
    /// May the migration take its next step now?
    Permit,
    /// A DDL-boundary report.
    Mark {
        /// Which boundary.
        event: MarkEvent,
        /// The revision it concerns.
        #[serde(default)]
        revision: Option<String>,
    },
    /// The migration's outcome.
    Outcome {
        /// Succeeded or failed.
        result: OutcomeResult,
        /// The last revision applied.
        #[serde(default)]
        revision: Option<String>,
        /// Its last error.
        #[serde(default)]
        error: Option<String>,
    },
    /// The entrypoint wrapper attaches (once per run).
    Attach,
    /// The wrapper's child ended.
    Exited {
        /// Exit code.
        #[serde(default)]
        code: Option<i32>,
        /// Terminating signal.
        #[serde(default)]
        signal: Option<i32>,
    },
}

/// Where the run stands, for `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunState {
    /// Asking for the leases.
    Acquiring,
    /// Both leases held.
    Held,
    /// Fenced: the migration must stop.
    Fenced,
    /// Over.
    Ended,
}

/// A reply line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case")]
pub enum Reply {
    /// Answer to `status`.
    Status {
        /// Where the run stands.
        state: RunState,
        /// ms left before the fence deadline (0 unless held).
        #[serde(rename = "remainingMs")]
        remaining_ms: u64,
        /// While acquiring: who holds the lease asked for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        holder: Option<String>,
    },
    /// A report was taken.
    Ok,
    /// The request was refused.
    Error {
        /// Why.
        message: String,
    },
    /// Answer to `permit`.
    Permit {
        /// Whether the step may start.
        granted: bool,
        /// ms left before the fence deadline.
        #[serde(rename = "remainingMs")]
        remaining_ms: u64,
        /// Why not, when not.
        message: String,
    },
    /// To the wrapper, while the leases are asked for: wait; `holder` is
    /// who holds the lease asked for, when another operation does. Sent
    /// again each time that changes.
    Waiting {
        /// The holder, in words.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        holder: Option<String>,
    },
    /// To the wrapper: start the migration.
    Start {
        /// ms left before the fence deadline.
        #[serde(rename = "remainingMs")]
        remaining_ms: u64,
        /// ms between SIGTERM and SIGKILL.
        #[serde(rename = "graceMs")]
        grace_ms: u64,
    },
    /// To the wrapper: do not start; exit with this code.
    Refused {
        /// Exit code.
        #[serde(rename = "exitCode")]
        exit_code: i32,
        /// Why.
        message: String,
    },
    /// To the wrapper: a renewal was confirmed.
    Held {
        /// ms left before the fence deadline.
        #[serde(rename = "remainingMs")]
        remaining_ms: u64,
    },
    /// To the wrapper: fence now.
    Fence {
        /// Why.
        reason: String,
        /// ms between SIGTERM and SIGKILL.
        #[serde(rename = "graceMs")]
        grace_ms: u64,
    },
    /// To the wrapper, after `exited`: exit with this code.
    Verdict {
        /// Exit code.
        #[serde(rename = "exitCode")]
        exit_code: i32,
        /// Why.
        message: String,
    },
}

/// Parses a request line.
pub fn parse(line: &str) -> Result<Request, String> {
    let req: Request = serde_json::from_str(line.trim_end()).map_err(|e| format!("invalid request: {e}"))?;
    let too_long = |v: &Option<String>, max: usize| v.as_ref().is_some_and(|s| s.len() > max);
    match &req {
        Request::Mark { revision, .. } | Request::Outcome { revision, .. } if too_long(revision, 256) => {
            Err("invalid request: revision longer than 256 bytes".into())
        }
        _ => Ok(req),
    }
}

/// `text` cut to `max_chars` characters, every character outside printable
/// ASCII escaped (`\n`, `\u{202e}`), `...` appended when cut: for values
/// that come from outside (server messages, the migration's reports).
pub fn bounded(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars) + 3);
    let mut chars = text.chars();
    for c in chars.by_ref().take(max_chars) {
        if c == ' ' || c.is_ascii_graphic() {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    if chars.next().is_some() {
        out.push_str("...");
    }
    out
}

/// `text` bounded and escaped ([`bounded`]) to at most 1024
/// characters (what the sidecar keeps), fewer when its JSON form would
/// pass `max` bytes.
fn fitting(text: &str, max: usize) -> String {
    let mut chars = 1024;
    loop {
        let b = bounded(text, chars);
        if chars == 0 || serde_json::to_string(&b).map_or(0, |j| j.len()) <= max {
            return b;
        }
        chars /= 2;
    }
}

impl Request {
    /// The request as [`client::call`] sends it: an outcome's error shortened so the
    /// line fits [`MAX_LINE`]. Found by the attack round: a migration's whole
    /// error text (`mark outcome failed --error "$ERR"`, or the runner's own
    /// report) made the line too long, and the outcome was refused.
    #[must_use]
    pub fn fitted(&self) -> Request {
        match self {
            Request::Outcome { result, revision, error } => Request::Outcome {
                result: *result,
                revision: revision.clone(),
                error: error.as_deref().map(|e| fitting(e, 3000)),
            },
            other => other.clone(),
        }
    }
}

/// The calling side: one request, one reply, within a timeout.
#[cfg(feature = "socket-client")]
pub mod client {
    use std::path::Path;
    use std::time::Duration;

    use tokio::io::{AsyncBufReadExt, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
    use tokio::net::UnixStream;

    use super::{MAX_LINE, Reply, Request};

    /// Sends `request` (as [`Request::fitted`]) to the sidecar at `path` and
    /// reads the first reply, all within `timeout`.
    pub async fn call(path: &Path, request: &Request, timeout: Duration) -> Result<Reply, String> {
        let request = &request.fitted();
        let work = async {
            let stream =
                UnixStream::connect(path).await.map_err(|e| format!("failed to connect to {}: {e}", path.display()))?;
            let (read, mut out) = stream.into_split();
            let mut line = serde_json::to_vec(request).map_err(|e| e.to_string())?;
            line.push(b'\n');
            out.write_all(&line).await.map_err(|e| format!("failed to send to the sidecar: {e}"))?;
            let mut reader = BufReader::new(read);
            match read_line(&mut reader).await {
                Ok(Some(l)) => {
                    serde_json::from_str::<Reply>(&l).map_err(|e| format!("unreadable reply from the sidecar: {e}"))
                }
                Ok(None) => Err("the sidecar closed the connection without a reply".into()),
                Err(e) => Err(format!("failed to read the sidecar's reply: {e}")),
            }
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| format!("no reply from the sidecar at {} within {timeout:?}", path.display()))?
    }

    /// Reads one line of at most [`MAX_LINE`] bytes; `None` at end of stream.
    /// Both ends read with it (the sidecar its requests, a caller its replies).
    pub async fn read_line(reader: &mut (impl AsyncBufReadExt + Unpin)) -> std::io::Result<Option<String>> {
        let mut buf = Vec::new();
        let n = reader.take(MAX_LINE as u64 + 1).read_until(b'\n', &mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        if buf.last() != Some(&b'\n') {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("request longer than {MAX_LINE} bytes or not ended by a newline"),
            ));
        }
        String::from_utf8(buf)
            .map(Some)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "request is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_or_say_why() {
        assert_eq!(parse(r#"{"op":"status"}"#), Ok(Request::Status));
        assert_eq!(
            parse(r#"{"op":"mark","event":"ddl-started","revision":"42"}"#),
            Ok(Request::Mark { event: MarkEvent::DdlStarted, revision: Some("42".into()) })
        );
        assert_eq!(
            parse(r#"{"op":"outcome","result":"failed","error":"boom"}"#),
            Ok(Request::Outcome { result: OutcomeResult::Failed, revision: None, error: Some("boom".into()) })
        );
        for bad in [
            r#"{"op":"mark","event":"ddl-maybe"}"#,
            r#"{"op":"steal-token"}"#,
            "not json",
            r#"{"event":"ddl-started"}"#,
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.starts_with("invalid request"), "{bad}: {e}");
        }
        let long = format!(r#"{{"op":"mark","event":"ddl-started","revision":"{}"}}"#, "r".repeat(300));
        assert!(parse(&long).unwrap_err().contains("revision"));
    }

    #[test]
    fn a_long_outcome_error_still_fits_the_line() {
        let req = Request::Outcome {
            result: OutcomeResult::Failed,
            revision: Some("r".repeat(256)),
            error: Some("\u{202e}e\n".repeat(5000)),
        }
        .fitted();
        let line = serde_json::to_string(&req).unwrap();
        assert!(line.len() < MAX_LINE, "{}", line.len());
        assert_eq!(parse(&line), Ok(req));
        let plain = Request::Outcome { result: OutcomeResult::Failed, revision: None, error: Some("e".repeat(5000)) };
        match plain.fitted() {
            Request::Outcome { error: Some(e), .. } => assert_eq!(e.len(), 1024 + 3, "1 KiB and `...`"),
            other => panic!("{other:?}"),
        }
        assert_eq!(Request::Status.fitted(), Request::Status);
    }
}
