//! How a run ends: the DDL boundary as the sidecar knows it, and the
//! verdict (exit code, result, message, final `ddlState`). Pure.
//!
//! Rule: before the DDL a fenced abort; at or after it, stop and require a
//! human to verify the schema, never a retry (docs/sidecar.md, "The DDL
//! boundary").
//!
//! The boundary: `ddl-started` opens it and `ddl-finished` closes it (one
//! pair per revision; between revisions no DDL is in flight and a fenced
//! abort is safe, since each revision committed). With
//! [`BoundaryMode::AtStart`] (the default) the migration is taken to start
//! DDL as soon as it starts, until it reports `ddl-finished`: a tool that
//! never reports is never mistaken for one that had not started. When the
//! migration reported nothing at all, a change of the schema fingerprint or
//! history rows seen in the database (`ddl.rs`, optional) counts as started.

use bloodraven_api::deploy::ErrorCode;

use crate::lease::machine::{FenceReason, GiveUp};
use crate::wire::DdlState;

/// Exit codes of `run` and `exec` (and of `hold`'s records). A migration's
/// own exit code passes through unchanged when the run was not fenced.
pub mod exit {
    /// Usage or configuration error (clap's code).
    pub const USAGE: i32 = 2;
    /// The migration failed with one of the sidecar's own codes (90–95),
    /// which would otherwise read as the sidecar's verdict.
    pub const MIGRATION_FAILED: i32 = 1;
    /// The migration never started: the acquire timeout passed while another
    /// operation held the mutex (or the group stayed unstable).
    pub const NOT_STARTED_TIMEOUT: i32 = 90;
    /// The migration never started: a refusal that asking again cannot change
    /// (`409 revoked`, `401`, `403`, `404`, `400`).
    pub const NOT_STARTED_REFUSED: i32 = 91;
    /// Fenced before the DDL boundary: the migration was stopped; safe to
    /// retry as a new operation.
    pub const FENCED: i32 = 92;
    /// Fenced at or after the DDL boundary: a person must verify the schema
    /// before any retry.
    pub const SCHEMA_VERIFICATION_REQUIRED: i32 = 93;
    /// The sidecar failed or could not be reached: the run's state is unknown
    /// (treat as schema verification required).
    pub const SIDECAR_FAILED: i32 = 94;
    /// The migration never started: an earlier operation left this
    /// instance's schema awaiting a person's verification (`409
    /// schema_verification_required`); no retry helps until it is cleared.
    pub const NOT_STARTED_VERIFICATION_REQUIRED: i32 = 95;
}

/// How the DDL boundary is learnt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BoundaryMode {
    /// The migration is taken to be in DDL from its start until it reports
    /// `ddl-finished` (safe for tools that never report).
    AtStart,
    /// Only the migration's reports (`mark ddl-started`/`ddl-finished`) and
    /// the database detection move the boundary.
    Reported,
}

/// What the migration reports about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    /// It is about to send DDL.
    DdlStarted,
    /// Its DDL (of one revision) committed.
    DdlFinished,
}

/// The DDL boundary of one run.
#[allow(clippy::struct_excessive_bools)] // independent facts, each set by one report
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    mode: BoundaryMode,
    in_ddl: bool,
    reported: bool,
    ever_started: bool,
    db_changed: bool,
    /// The revision last reported.
    pub revision: Option<String>,
}

impl Boundary {
    /// Before the migration starts.
    pub fn new(mode: BoundaryMode) -> Boundary {
        Boundary { mode, in_ddl: false, reported: false, ever_started: false, db_changed: false, revision: None }
    }

    /// The migration was started (the wrapper got its permission).
    pub fn migration_started(&mut self) {
        if self.mode == BoundaryMode::AtStart && !self.reported {
            self.in_ddl = true;
            self.ever_started = true;
        }
    }

    /// A report from the migration.
    pub fn report(&mut self, report: Report, revision: Option<String>) {
        self.reported = true;
        if revision.is_some() {
            self.revision = revision;
        }
        match report {
            Report::DdlStarted => {
                self.in_ddl = true;
                self.ever_started = true;
            }
            Report::DdlFinished => self.in_ddl = false,
        }
    }

    /// The database detection saw the schema or a history table change
    /// since the grant. Counts only when the migration reported nothing.
    pub fn database_changed(&mut self) {
        self.db_changed = true;
    }

    /// Whether a fence now would leave a schema that needs a person.
    pub fn in_ddl(&self) -> bool {
        self.in_ddl || (self.db_changed && !self.reported)
    }

    /// Whether DDL was ever reported or assumed started.
    pub fn ever_started(&self) -> bool {
        self.ever_started || (self.db_changed && !self.reported)
    }

    /// The `ddlState` to send with renewals while the migration runs.
    pub fn wire_state(&self) -> DdlState {
        if self.in_ddl() { DdlState::Started } else { DdlState::Before }
    }
}

/// How the migration process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessEnd {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i32>,
}

impl ProcessEnd {
    /// The shell's convention: the code, or 128 + the signal.
    pub fn shell_code(self) -> i32 {
        match (self.code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => 1,
        }
    }
}

/// How the run ended, as the verdict needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Acquisition gave up: the migration never started.
    NotStarted(GiveUp),
    /// The migration ended while the leases were held; whether it was in
    /// DDL when it ended.
    Finished {
        /// How it ended.
        process: ProcessEnd,
        /// In DDL at its end (reported `ddl-started` without
        /// `ddl-finished`, or assumed so by [`BoundaryMode::AtStart`]).
        in_ddl: bool,
    },
    /// The run was fenced; the DDL boundary at the fence; how the migration
    /// ended, if known.
    Fenced {
        /// Why.
        reason: FenceReason,
        /// In DDL at the fence.
        in_ddl: bool,
        /// The migration's end, if seen.
        process: Option<ProcessEnd>,
    },
}

/// The result of a run: what the exit code, the termination message, the
/// final log line and the Lease say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Process exit code.
    pub exit_code: i32,
    /// `succeeded`, `failed`, `not-started`, `fenced`, `schema-verification-required`.
    pub result: &'static str,
    /// For a person.
    pub message: String,
    /// The final `ddlState` (sent with the last renewal when the leases are
    /// still held; otherwise what was last known).
    pub ddl_state: DdlState,
}

/// How a process ended, for a person: `exit code N` or `signal N`.
fn describe(end: ProcessEnd) -> String {
    match (end.code, end.signal) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        (None, None) => "unknown".to_owned(),
    }
}

/// Decides the verdict.
pub fn verdict(ending: &Ending) -> Verdict {
    match ending {
        Ending::NotStarted(give_up) => {
            let exit_code = match give_up {
                GiveUp::Timeout { .. } => exit::NOT_STARTED_TIMEOUT,
                GiveUp::Refused { code, .. } if code == ErrorCode::SchemaVerificationRequired.as_str() => {
                    exit::NOT_STARTED_VERIFICATION_REQUIRED
                }
                _ => exit::NOT_STARTED_REFUSED,
            };
            Verdict {
                exit_code,
                result: "not-started",
                message: format!("the migration was not started: {give_up}"),
                ddl_state: DdlState::Before,
            }
        }
        Ending::Finished { process, in_ddl } => {
            let code = process.shell_code();
            if code == 0 {
                Verdict {
                    exit_code: 0,
                    result: "succeeded",
                    message: "the migration succeeded while both leases were held".into(),
                    ddl_state: DdlState::Completed,
                }
            } else if *in_ddl {
                // Whatever ended it (its own failure, a signal from the
                // kubelet when the Pod was deleted, a crash), DDL may be half
                // done: the same as a fence inside the boundary.
                Verdict {
                    exit_code: exit::SCHEMA_VERIFICATION_REQUIRED,
                    result: "schema-verification-required",
                    message: format!(
                        "schema verification required: the migration ended ({}) at or after its DDL boundary without completing; do not retry until a person has verified the schema",
                        describe(*process)
                    ),
                    ddl_state: DdlState::Started,
                }
            } else if (exit::NOT_STARTED_TIMEOUT..=exit::NOT_STARTED_VERIFICATION_REQUIRED).contains(&code) {
                // CMD's own 92 would read as "fenced before the DDL, safe to
                // retry" (found by the attack round): the sidecar's codes are
                // never passed through.
                Verdict {
                    exit_code: exit::MIGRATION_FAILED,
                    result: "failed",
                    message: format!(
                        "the migration failed (exit code {code}, reported as {}: 90-95 are the sidecar's) while both leases were held",
                        exit::MIGRATION_FAILED
                    ),
                    ddl_state: DdlState::Failed,
                }
            } else {
                Verdict {
                    exit_code: code,
                    result: "failed",
                    message: format!("the migration failed (exit code {code}) while both leases were held"),
                    ddl_state: DdlState::Failed,
                }
            }
        }
        Ending::Fenced { reason, in_ddl: true, .. } => Verdict {
            exit_code: exit::SCHEMA_VERIFICATION_REQUIRED,
            result: "schema-verification-required",
            message: format!(
                "schema verification required: fenced at or after the DDL boundary ({reason}); do not retry until a person has verified the schema"
            ),
            ddl_state: DdlState::Started,
        },
        Ending::Fenced { reason, in_ddl: false, .. } => Verdict {
            exit_code: exit::FENCED,
            result: "fenced",
            message: format!(
                "fenced before the DDL boundary ({reason}); the migration was stopped and may be retried as a new operation"
            ),
            ddl_state: DdlState::Before,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::LeaseKind;

    #[test]
    fn boundary_table() {
        // (mode, events, in_ddl after)
        type Step = fn(&mut Boundary);
        let start: Step = Boundary::migration_started;
        let ddl_on: Step = |b| b.report(Report::DdlStarted, Some("2".into()));
        let ddl_off: Step = |b| b.report(Report::DdlFinished, None);
        let db: Step = Boundary::database_changed;
        let cases: Vec<(BoundaryMode, Vec<Step>, bool)> = vec![
            (BoundaryMode::AtStart, vec![], false),
            (BoundaryMode::AtStart, vec![start], true),
            (BoundaryMode::AtStart, vec![start, ddl_off], false),
            (BoundaryMode::AtStart, vec![start, ddl_on, ddl_off, ddl_on], true),
            (BoundaryMode::Reported, vec![start], false),
            (BoundaryMode::Reported, vec![start, ddl_on], true),
            (BoundaryMode::Reported, vec![start, ddl_on, ddl_off], false),
            (BoundaryMode::Reported, vec![start, db], true),
            (BoundaryMode::Reported, vec![start, ddl_on, ddl_off, db], false),
        ];
        for (i, (mode, steps, want)) in cases.into_iter().enumerate() {
            let mut b = Boundary::new(mode);
            for s in steps {
                s(&mut b);
            }
            assert_eq!(b.in_ddl(), want, "case {i}");
            assert_eq!(b.wire_state(), if want { DdlState::Started } else { DdlState::Before }, "case {i}");
        }
    }

    /// Whatever ends a migration inside its DDL boundary — its own failure,
    /// SIGTERM from the kubelet when Helm deletes the Job, SIGKILL — the
    /// verdict is the same as a fence there: `started`, exit 93.
    #[test]
    fn every_end_inside_the_ddl_boundary_needs_a_person() {
        let ends = [
            ProcessEnd { code: Some(1), signal: None },
            ProcessEnd { code: Some(2), signal: None },
            ProcessEnd { code: Some(92), signal: None },
            ProcessEnd { code: None, signal: Some(15) },
            ProcessEnd { code: None, signal: Some(9) },
            ProcessEnd { code: Some(143), signal: None },
        ];
        for process in ends {
            let v = verdict(&Ending::Finished { process, in_ddl: true });
            assert_eq!(
                (v.exit_code, v.result, v.ddl_state),
                (exit::SCHEMA_VERIFICATION_REQUIRED, "schema-verification-required", DdlState::Started),
                "{process:?}"
            );
            assert!(v.message.starts_with("schema verification required"), "{}", v.message);
            let before = verdict(&Ending::Finished { process, in_ddl: false });
            assert_eq!((before.result, before.ddl_state), ("failed", DdlState::Failed), "{process:?}");
        }
    }

    #[test]
    fn a_refusal_for_a_schema_awaiting_verification_has_its_own_code() {
        let refused = |code: &str| {
            verdict(&Ending::NotStarted(GiveUp::Refused {
                kind: bloodraven_api::deploy::LeaseKind::Migration,
                status: 409,
                code: code.into(),
                message: "m".into(),
            }))
        };
        let v = refused("schema_verification_required");
        assert_eq!((v.exit_code, v.result, v.ddl_state), (95, "not-started", DdlState::Before));
        assert_eq!(refused("forbidden").exit_code, exit::NOT_STARTED_REFUSED);
    }

    #[test]
    fn verdicts() {
        let ok = ProcessEnd { code: Some(0), signal: None };
        let trapped = ProcessEnd { code: Some(0), signal: None };
        let killed = ProcessEnd { code: None, signal: Some(9) };
        let revoked =
            FenceReason::Revoked { kind: LeaseKind::Migration, reason: "TopologyChanged".into(), generation: Some(2) };
        let done = |process, in_ddl| verdict(&Ending::Finished { process, in_ddl });
        let v = done(ok, false);
        assert_eq!((v.exit_code, v.result, v.ddl_state), (0, "succeeded", DdlState::Completed));
        let v = done(ok, true);
        assert_eq!((v.exit_code, v.result, v.ddl_state), (0, "succeeded", DdlState::Completed), "exit 0 completed");
        let v = done(killed, false);
        assert_eq!((v.exit_code, v.result, v.ddl_state), (137, "failed", DdlState::Failed));
        // Attack round: CMD's own 92 read as "fenced before the DDL: retry".
        for own in 90..=95 {
            let v = done(ProcessEnd { code: Some(own), signal: None }, false);
            assert_eq!((v.exit_code, v.result), (exit::MIGRATION_FAILED, "failed"), "{own}");
            assert!(v.message.contains(&format!("exit code {own}")), "{}", v.message);
        }
        for passed in [1, 3, 89, 96, 255] {
            assert_eq!(done(ProcessEnd { code: Some(passed), signal: None }, false).exit_code, passed);
        }
        // A migration that traps SIGTERM and exits 0 after a fence still fails.
        let v = verdict(&Ending::Fenced { reason: revoked.clone(), in_ddl: false, process: Some(trapped) });
        assert_eq!((v.exit_code, v.result), (exit::FENCED, "fenced"));
        let v = verdict(&Ending::Fenced { reason: revoked, in_ddl: true, process: Some(trapped) });
        assert_eq!((v.exit_code, v.result), (exit::SCHEMA_VERIFICATION_REQUIRED, "schema-verification-required"));
        assert!(v.message.starts_with("schema verification required"), "{}", v.message);
        let holder = crate::lease::machine::HolderInfo {
            operation_id: "op-a".into(),
            instance: "counter-app".into(),
            expires_at: "2030-01-01T00:00:00Z".into(),
        };
        let v = verdict(&Ending::NotStarted(GiveUp::Timeout {
            kind: LeaseKind::Migration,
            holder: Some(holder),
            last: String::new(),
        }));
        assert_eq!(v.exit_code, exit::NOT_STARTED_TIMEOUT);
        assert!(v.message.contains("op-a") && v.message.contains("counter-app"), "{}", v.message);
    }
}
