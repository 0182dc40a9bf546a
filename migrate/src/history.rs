//! The history table `bloodraven_schema_history` (the name the sidecar's
//! database detection already reads) and the plan drawn from it.
//!
//! One row per revision: `version`, `description`, `checksum` (SHA-256
//! hex), `state`, `ddl_started` (shown as `ddlStarted`), `attempts`,
//! `started_at`, `finished_at`, `installed_by`.
//!
//! States and their transitions ([`transition`], pure):
//!
//! | from | event | to | how |
//! |---|---|---|---|
//! | none, rolled-back | DML revision committed | applied | the row is inserted in the revision's own transaction: both or neither |
//! | none, rolled-back | DDL revision about to run | started (`ddlStarted`) | committed before its first statement (MySQL DDL commits on its own) |
//! | started | its last statement succeeded | applied | |
//! | started | failed before any statement took effect | none | the row is removed: nothing of it happened |
//! | started | anything else (failed later, lost connection, killed) | started | **dirty**: the next run refuses to go past it |
//! | started | `resolve V --applied` | applied | a person checked the schema |
//! | started | `resolve V --rolled-back` | rolled-back | a person undid it; the next run applies it again |
//! | empty history | `baseline V` | baseline | another tool applied every revision up to V; `apply` starts above it |
//!
//! The plan (a failed run resumes from the last revision that committed;
//! Flyway's validation): refuse on any dirty
//! row, on an applied revision whose file changed (checksum), and on a
//! pending revision older than the newest applied one (Flyway's
//! `outOfOrder=false`); the rest is applied in version order. A
//! `baseline` row at V (Flyway's `baseline`: the schema was migrated by
//! another tool) stands for every revision up to V: their files are
//! neither applied nor checked.

use crate::revision::Revision;

/// The history table's name.
pub const TABLE: &str = "bloodraven_schema_history";

/// The columns the runner reads and writes: a table of the history's
/// name without them is another tool's, and is refused.
pub const COLUMNS: [&str; 9] = [
    "version",
    "description",
    "checksum",
    "state",
    "ddl_started",
    "attempts",
    "started_at",
    "finished_at",
    "installed_by",
];

/// `CREATE TABLE IF NOT EXISTS` for the history table.
pub const CREATE: &str = "CREATE TABLE IF NOT EXISTS bloodraven_schema_history (
  version BIGINT UNSIGNED NOT NULL PRIMARY KEY,
  description VARCHAR(200) NOT NULL,
  checksum CHAR(64) NOT NULL,
  state VARCHAR(16) NOT NULL,
  ddl_started TINYINT(1) NOT NULL DEFAULT 0,
  attempts INT UNSIGNED NOT NULL DEFAULT 1,
  started_at DATETIME(6) NOT NULL,
  finished_at DATETIME(6) NULL,
  installed_by VARCHAR(200) NOT NULL DEFAULT ''
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";

/// A row's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// A DDL revision is running, or was left half done (dirty).
    Started,
    /// Committed.
    Applied,
    /// A person said none of it is in place; applied again next run.
    RolledBack,
    /// `bloodraven-migrate baseline V`: every revision up to this row's
    /// version was applied by another tool before this runner took over.
    Baseline,
    /// A state no runner writes (the row was edited by hand): refused
    /// like a dirty row, and settled the same way (`resolve`).
    Unknown,
}

impl State {
    /// The column's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Started => "started",
            State::Applied => "applied",
            State::RolledBack => "rolled-back",
            State::Baseline => "baseline",
            State::Unknown => "unknown",
        }
    }

    /// Parses the column.
    pub fn parse(s: &str) -> Option<State> {
        match s {
            "started" => Some(State::Started),
            "applied" => Some(State::Applied),
            "rolled-back" => Some(State::RolledBack),
            "baseline" => Some(State::Baseline),
            _ => None,
        }
    }
}

/// What happens to a revision's row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A DML revision committed with its row.
    DmlCommitted,
    /// A DDL revision is about to run its first statement.
    DdlStarting,
    /// The DDL revision's statements all succeeded.
    DdlFinished,
    /// It failed before any of its statements took effect.
    FailedClean,
    /// `resolve --applied`.
    ResolvedApplied,
    /// `resolve --rolled-back`.
    ResolvedRolledBack,
    /// `baseline V` on a history with no row.
    Baselined,
}

/// The next state (`None`: no row), or why the event is not allowed.
pub fn transition(from: Option<State>, event: Event) -> Result<Option<State>, String> {
    use Event as E;
    use State as S;
    match (from, event) {
        (None | Some(S::RolledBack), E::DmlCommitted) | (Some(S::Started), E::DdlFinished | E::ResolvedApplied) => {
            Ok(Some(S::Applied))
        }
        (None | Some(S::RolledBack), E::DdlStarting) => Ok(Some(S::Started)),
        (None, E::Baselined) => Ok(Some(S::Baseline)),
        (Some(S::Started), E::FailedClean) => Ok(None),
        (Some(S::Started | S::Unknown), E::ResolvedRolledBack) => Ok(Some(S::RolledBack)),
        (Some(S::Unknown), E::ResolvedApplied) => Ok(Some(S::Applied)),
        (Some(s), E::ResolvedApplied | E::ResolvedRolledBack) => {
            Err(format!("the revision is {}, not dirty (started): nothing to resolve", s.as_str()))
        }
        (None, E::ResolvedApplied | E::ResolvedRolledBack) => {
            Err("the revision has no history row: nothing to resolve".into())
        }
        (from, event) => Err(format!("{event:?} is not allowed from {}", from.map_or("no row", State::as_str))),
    }
}

/// A history row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The version.
    pub version: u64,
    /// The description.
    pub description: String,
    /// SHA-256 hex of the file as applied.
    pub checksum: String,
    /// The state.
    pub state: State,
    /// The state column as stored (differs from `state` only for `Unknown`).
    pub state_text: String,
    /// Whether the revision was marked before DDL.
    pub ddl_started: bool,
    /// Attempts it took.
    pub attempts: u32,
    /// When it (last) started, server time `YYYY-MM-DD hh:mm:ss.ffffff`.
    pub started_at: String,
    /// When it finished.
    pub finished_at: Option<String>,
}

/// Why the run must not go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A revision was left `started`.
    #[error(
        "revision V{version} ({description}) is dirty: it was marked started before its DDL and never finished, so some of it may be in place. \
         Check the schema by hand, then run `bloodraven-migrate resolve {version} --applied` (all of it is in place) \
         or `bloodraven-migrate resolve {version} --rolled-back` (none of it is: it will run again). The runner never re-issues DDL blindly"
    )]
    Dirty {
        /// The version.
        version: u64,
        /// Its description.
        description: String,
    },
    /// A row in a state no runner writes.
    #[error(
        "the history row of revision V{version} has state `{state}`, which bloodraven-migrate never writes (edited by hand?): \
         check the schema, then run `bloodraven-migrate resolve {version} --applied` (all of it is in place) or `--rolled-back` (none of it is)"
    )]
    UnknownState {
        /// The version.
        version: u64,
        /// The stored state.
        state: String,
    },
    /// An applied revision's file changed.
    #[error(
        "revision V{version} was applied with checksum {recorded} but {file} now has checksum {actual}: \
         an applied revision must not change; restore the file and add a new revision instead"
    )]
    ChecksumMismatch {
        /// The version.
        version: u64,
        /// The file.
        file: String,
        /// The checksum in the history table.
        recorded: String,
        /// The file's checksum.
        actual: String,
    },
    /// A pending revision is older than the newest applied one.
    #[error(
        "revision V{version} ({file}) is pending but V{newest} is already applied: revisions are applied in order; renumber it above V{newest}"
    )]
    OutOfOrder {
        /// The pending version.
        version: u64,
        /// Its file.
        file: String,
        /// The newest applied version.
        newest: u64,
    },
}

/// What to do.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan<'a> {
    /// Revisions to apply, in version order.
    pub pending: Vec<&'a Revision>,
    /// Revisions at or below the baseline: another tool applied them;
    /// neither applied nor checked.
    pub below_baseline: Vec<&'a Revision>,
    /// Applied versions with no file in the directory (a warning: an older
    /// release's directory).
    pub unknown: Vec<u64>,
}

/// Compares the directory with the history (read under the mutex).
pub fn plan<'a>(files: &'a [Revision], rows: &[Row]) -> Result<Plan<'a>, PlanError> {
    if let Some(r) = rows.iter().find(|r| r.state == State::Unknown) {
        // As stored, escaped: a row edited by hand may hold anything.
        return Err(PlanError::UnknownState { version: r.version, state: crate::revision::escape(&r.state_text) });
    }
    if let Some(r) = rows.iter().find(|r| r.state == State::Started) {
        return Err(PlanError::Dirty { version: r.version, description: crate::revision::escape(&r.description) });
    }
    let row = |v: u64| rows.iter().find(|r| r.version == v);
    let baseline = rows.iter().filter(|r| r.state == State::Baseline).map(|r| r.version).max();
    let newest = rows.iter().filter(|r| matches!(r.state, State::Applied | State::Baseline)).map(|r| r.version).max();
    let mut pending = Vec::new();
    let mut below_baseline = Vec::new();
    for f in files {
        if baseline.is_some_and(|b| f.version <= b) && row(f.version).is_none_or(|r| r.state == State::Baseline) {
            below_baseline.push(f);
            continue;
        }
        match row(f.version) {
            Some(r) if r.state == State::Applied => {
                // A row recorded before the line-ending rule holds the raw bytes' checksum.
                if r.checksum != f.checksum && r.checksum != f.raw_checksum {
                    return Err(PlanError::ChecksumMismatch {
                        version: f.version,
                        file: f.file.clone(),
                        recorded: r.checksum.clone(),
                        actual: f.checksum.clone(),
                    });
                }
            }
            _ => {
                if let Some(newest) = newest.filter(|n| *n > f.version) {
                    return Err(PlanError::OutOfOrder { version: f.version, file: f.file.clone(), newest });
                }
                pending.push(f);
            }
        }
    }
    let unknown = rows
        .iter()
        .filter(|r| r.state == State::Applied && !files.iter().any(|f| f.version == r.version))
        .map(|r| r.version)
        .collect();
    Ok(Plan { pending, below_baseline, unknown })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::revision::parse_revision;

    fn file(v: u64, sql: &str) -> Revision {
        parse_revision(&format!("V{v}__r.sql"), v, "r".into(), sql.as_bytes()).unwrap()
    }

    fn row(f: &Revision, state: State) -> Row {
        Row {
            version: f.version,
            description: f.description.clone(),
            checksum: f.checksum.clone(),
            state,
            state_text: state.as_str().into(),
            ddl_started: false,
            attempts: 1,
            started_at: String::new(),
            finished_at: None,
        }
    }

    #[test]
    fn resumes_after_the_last_applied_revision() {
        let files = vec![file(1, "UPDATE t SET a=1"), file(2, "ALTER TABLE t ADD b INT"), file(3, "UPDATE t SET a=3")];
        let rows = vec![row(&files[0], State::Applied), row(&files[1], State::RolledBack)];
        let p = plan(&files, &rows).unwrap();
        assert_eq!(p.pending.iter().map(|r| r.version).collect::<Vec<_>>(), vec![2, 3]);
        assert!(p.unknown.is_empty());
        let p = plan(&files[1..], &rows[..1]).unwrap();
        assert_eq!(p.unknown, vec![1]);
    }

    #[test]
    fn refuses_dirty_changed_and_out_of_order() {
        let files = vec![file(1, "UPDATE t SET a=1"), file(2, "ALTER TABLE t ADD b INT"), file(3, "UPDATE t SET a=3")];
        let e = plan(&files, &[row(&files[0], State::Applied), row(&files[1], State::Started)]).unwrap_err();
        assert!(matches!(e, PlanError::Dirty { version: 2, .. }));
        let text = e.to_string();
        assert!(text.contains("resolve 2 --applied") && text.contains("resolve 2 --rolled-back"), "{text}");

        let mut changed = row(&files[0], State::Applied);
        changed.checksum = "0".repeat(64);
        let e = plan(&files, &[changed]).unwrap_err().to_string();
        assert!(e.contains("V1") && e.contains(&files[0].checksum) && e.contains("must not change"), "{e}");

        let e = plan(&files, &[row(&files[2], State::Applied)]).unwrap_err();
        assert!(matches!(e, PlanError::OutOfOrder { version: 1, newest: 3, .. }), "{e:?}");
    }

    #[test]
    fn a_baseline_stands_for_every_revision_up_to_it() {
        let files = vec![file(1, "CREATE TABLE t (a INT)"), file(2, "UPDATE t SET a=2"), file(3, "UPDATE t SET a=3")];
        let mut b = row(&files[1], State::Baseline);
        b.checksum = String::new();
        let p = plan(&files, std::slice::from_ref(&b)).unwrap();
        assert_eq!(p.pending.iter().map(|r| r.version).collect::<Vec<_>>(), vec![3]);
        assert_eq!(p.below_baseline.iter().map(|r| r.version).collect::<Vec<_>>(), vec![1, 2]);
        assert!(p.unknown.is_empty(), "a baseline row is not an applied revision without a file");
        // Files below the baseline are not checked: another tool applied them, maybe from other bytes.
        let changed = vec![file(1, "CREATE TABLE t (a BIGINT)"), file(2, "UPDATE t SET a=22"), files[2].clone()];
        assert_eq!(plan(&changed, std::slice::from_ref(&b)).unwrap().pending.len(), 1);
        // Above it the usual rules hold: V3 applied, then a new V2.5-like file below V3 is out of order.
        let v3 = row(&files[2], State::Applied);
        let with_v4 = vec![files[0].clone(), files[1].clone(), files[2].clone(), file(4, "UPDATE t SET a=4")];
        let p = plan(&with_v4, &[b.clone(), v3.clone()]).unwrap();
        assert_eq!(p.pending.iter().map(|r| r.version).collect::<Vec<_>>(), vec![4]);
        let mut v3_changed = v3;
        v3_changed.checksum = "0".repeat(64);
        assert!(matches!(
            plan(&with_v4, &[b.clone(), v3_changed]),
            Err(PlanError::ChecksumMismatch { version: 3, .. })
        ));
        // A baseline with no file of its version (the other tool's numbering ended there) is fine.
        let mut high = b;
        high.version = 10;
        let p = plan(&with_v4, &[high]).unwrap();
        assert!(p.pending.is_empty() && p.below_baseline.len() == 4, "{p:?}");
    }

    #[test]
    fn a_baseline_is_taken_only_on_an_empty_history_and_is_never_resolved() {
        assert_eq!(transition(None, Event::Baselined), Ok(Some(State::Baseline)));
        for s in [State::Started, State::Applied, State::RolledBack, State::Baseline, State::Unknown] {
            assert!(transition(Some(s), Event::Baselined).is_err(), "{s:?}");
        }
        for e in [Event::ResolvedApplied, Event::ResolvedRolledBack, Event::DdlStarting, Event::DmlCommitted] {
            assert!(transition(Some(State::Baseline), e).is_err(), "{e:?}");
        }
        assert_eq!(State::parse("baseline"), Some(State::Baseline));
    }

    #[test]
    fn state_transitions() {
        use Event as E;
        use State as S;
        let ok = [
            (None, E::DmlCommitted, Some(S::Applied)),
            (Some(S::RolledBack), E::DmlCommitted, Some(S::Applied)),
            (None, E::DdlStarting, Some(S::Started)),
            (Some(S::Started), E::DdlFinished, Some(S::Applied)),
            (Some(S::Started), E::FailedClean, None),
            (Some(S::Started), E::ResolvedApplied, Some(S::Applied)),
            (Some(S::Started), E::ResolvedRolledBack, Some(S::RolledBack)),
        ];
        for (from, event, to) in ok {
            assert_eq!(transition(from, event), Ok(to), "{from:?} {event:?}");
        }
        for (from, event) in [
            (Some(S::Applied), E::ResolvedApplied),
            (None, E::ResolvedRolledBack),
            (Some(S::Applied), E::DdlStarting),
            (Some(S::Started), E::DmlCommitted),
            (Some(S::Applied), E::DmlCommitted),
        ] {
            assert!(transition(from, event).is_err(), "{from:?} {event:?}");
        }
        for s in [S::Started, S::Applied, S::RolledBack] {
            assert_eq!(State::parse(s.as_str()), Some(s));
        }
    }

    #[test]
    fn attack_a_row_edited_to_a_state_no_runner_writes_is_refused_and_resolvable() {
        let files = vec![file(1, "UPDATE t SET a=1"), file(2, "UPDATE t SET a=2")];
        let mut r = row(&files[0], State::Unknown);
        r.state_text = "done".into();
        let e = plan(&files, &[r]).unwrap_err().to_string();
        assert!(e.contains("V1") && e.contains("`done`") && e.contains("resolve 1 --applied"), "{e}");
        assert_eq!(transition(Some(State::Unknown), Event::ResolvedApplied), Ok(Some(State::Applied)));
        assert_eq!(transition(Some(State::Unknown), Event::ResolvedRolledBack), Ok(Some(State::RolledBack)));
        assert!(transition(Some(State::Unknown), Event::DmlCommitted).is_err());
    }

    #[test]
    fn attack_a_deleted_row_of_an_older_revision_is_out_of_order_not_reapplied() {
        // A person deleted V1's row by hand while V2 stays applied: V1 is not re-run.
        let files = vec![file(1, "UPDATE t SET a=a+1"), file(2, "UPDATE t SET a=2")];
        let e = plan(&files, &[row(&files[1], State::Applied)]).unwrap_err();
        assert!(matches!(e, PlanError::OutOfOrder { version: 1, newest: 2, .. }), "{e:?}");
    }

    #[test]
    fn attack_a_crlf_checkout_of_an_applied_revision_is_not_a_change() {
        let applied_lf = file(1, "UPDATE t SET a=1;\nUPDATE t SET b=2;\n");
        let crlf = vec![file(1, "UPDATE t SET a=1;\r\nUPDATE t SET b=2;\r\n")];
        assert!(plan(&crlf, &[row(&applied_lf, State::Applied)]).unwrap().pending.is_empty());
        // A row an older runner recorded from a CRLF checkout (raw bytes) still matches that checkout.
        let mut old = row(&crlf[0], State::Applied);
        old.checksum = crlf[0].raw_checksum.clone();
        assert!(plan(&crlf, &[old]).unwrap().pending.is_empty());
        let edited = vec![file(1, "UPDATE t SET a=1;\nUPDATE t SET b=3;\n")];
        assert!(matches!(
            plan(&edited, &[row(&applied_lf, State::Applied)]),
            Err(PlanError::ChecksumMismatch { version: 1, .. })
        ));
    }
}
