//! `status`, `resolve`, `diagnose` and `baseline`: a person's tools, on
//! the same database flags as `apply`. Text from the history table
//! (descriptions, states a person wrote by hand) is printed escaped
//! ([`crate::revision::escape`]), like file names.

use std::time::Duration;

use crate::apply::exit;
use crate::blockers;
use crate::config::{BaselineArgs, DbArgs, ResolveArgs, StatusArgs};
use crate::db::{DbError, Session, Target};
use crate::error::RunnerError;
use crate::history::{self, Event, State, transition};
use crate::revision::escape;

/// A tool's exit code: 0, or its error's ([`RunnerError::exit_code`]).
fn code(result: Result<(), RunnerError>) -> i32 {
    result.map_or_else(|e| e.exit_code(), |()| exit::OK)
}

/// Their session: the runner's lock timeout (5 s) and a 10-minute idle bound.
async fn open(db: &DbArgs) -> Result<Session, RunnerError> {
    let target = Target::from_args(db).map_err(|e| {
        eprintln!("bloodraven-migrate: {e}");
        RunnerError::Target(e)
    })?;
    target.connect(Some(Duration::from_secs(5)), Duration::from_secs(600)).await.map_err(|e| {
        eprintln!("bloodraven-migrate: {e}");
        RunnerError::Connect(e)
    })
}

/// Prints `bloodraven-migrate: {what}: {e}`; the error for it.
fn database(what: String, e: DbError) -> RunnerError {
    eprintln!("bloodraven-migrate: {what}: {e}");
    RunnerError::Database { what, source: e }
}

/// [`open`], then the schema's run lock without waiting: a person's
/// change to the history (`resolve`, `baseline`) never races a run.
/// Refused (exit 3) with `why`, whose `{holder}` names the run's
/// connection, while a run holds it.
async fn open_alone(db: &DbArgs, why: &str) -> Result<Session, RunnerError> {
    let mut s = open(db).await?;
    match s.try_run_lock(Duration::ZERO).await {
        Ok(None) => Ok(s),
        Ok(Some(holder)) => {
            let why = why.replace("{holder}", &holder.to_string());
            eprintln!("bloodraven-migrate: {why}");
            Err(RunnerError::Busy(why))
        }
        Err(e) => {
            eprintln!("bloodraven-migrate: failed to take the schema's run lock: {e}");
            Err(RunnerError::RunLock(e))
        }
    }
}

/// The revisions of `--dir`, when given (exit 2 when it cannot be read).
fn load_dir(dir: Option<&std::path::Path>) -> Result<Option<Vec<crate::revision::Revision>>, RunnerError> {
    dir.map(crate::revision::load_dir).transpose().map_err(|e| {
        eprintln!("bloodraven-migrate: {e}");
        RunnerError::Revisions(e)
    })
}

/// `status`'s line for a file with no history row of its own.
fn file_line(f: &crate::revision::Revision, state: &str) {
    println!(
        "V{:<7} {:<12} {:<10} {:<8} {:<26} {:<26} {}",
        f.version,
        state,
        "-",
        "-",
        "-",
        "-",
        escape(&f.description)
    );
}

/// `status`: one line per history row, and with `--dir` the pending and
/// changed revisions. Exit 0, or 3 when the history would refuse `apply`.
pub async fn status(a: StatusArgs) -> i32 {
    code(status_of(a).await)
}

async fn status_of(a: StatusArgs) -> Result<(), RunnerError> {
    let files = load_dir(a.dir.as_deref())?;
    let mut s = open(&a.db).await?;
    let rows = match s.has_history().await {
        Ok(false) => Vec::new(),
        Ok(true) => match s.history().await {
            Ok(r) => r,
            Err(e) => return Err(database(format!("failed to read {}", history::TABLE), e)),
        },
        Err(e) => {
            eprintln!("bloodraven-migrate: {e}");
            return Err(RunnerError::Database { what: "failed to look for the history table".into(), source: e });
        }
    };
    println!(
        "{:<8} {:<12} {:<10} {:<8} {:<26} {:<26} description",
        "version", "state", "ddlStarted", "attempts", "started", "finished"
    );
    for r in &rows {
        println!(
            "V{:<7} {:<12} {:<10} {:<8} {:<26} {:<26} {}",
            r.version,
            escape(&r.state_text),
            r.ddl_started,
            r.attempts,
            r.started_at,
            r.finished_at.as_deref().unwrap_or("-"),
            escape(&r.description)
        );
    }
    let Some(files) = files else { return Ok(()) };
    match history::plan(&files, &rows) {
        Ok(p) => {
            // Files the baseline covers that have no row of their own (the baseline's row is listed above).
            for r in p.below_baseline.iter().filter(|f| !rows.iter().any(|x| x.version == f.version)) {
                file_line(r, "baselined");
            }
            for r in &p.pending {
                file_line(r, "pending");
            }
            Ok(())
        }
        Err(e) => {
            // What the plan would have shown, as far as it can be told
            // without one: the files with no row, and the files whose
            // checksum is not the one applied.
            let baseline = rows.iter().filter(|r| r.state == State::Baseline).map(|r| r.version).max();
            for f in files.iter().filter(|f| !rows.iter().any(|r| r.version == f.version)) {
                let state = if baseline.is_some_and(|b| f.version <= b) { "baselined" } else { "pending" };
                file_line(f, state);
            }
            for f in &files {
                if let Some(r) = rows
                    .iter()
                    .find(|r| r.version == f.version && r.state != State::Baseline && r.checksum != f.checksum)
                {
                    println!(
                        "V{} changed: the file's checksum is {}, the history's {} (a revision must not change once applied)",
                        f.version,
                        f.checksum,
                        escape(&r.checksum)
                    );
                }
            }
            println!("apply would refuse: {e}");
            Err(RunnerError::WouldRefuse(e))
        }
    }
}

/// `resolve V --applied|--rolled-back`.
pub async fn resolve(a: ResolveArgs) -> i32 {
    code(resolve_of(a).await)
}

async fn resolve_of(a: ResolveArgs) -> Result<(), RunnerError> {
    let to_event = if a.applied { Event::ResolvedApplied } else { Event::ResolvedRolledBack };
    // A `started` row of a run in progress is not dirty: settle only when no run holds the schema.
    let why = format!(
        "cannot resolve V{}: a bloodraven-migrate run (connection {{holder}}) is applying revisions on this schema right now, so a `started` row may be running, not dirty; wait for it to end",
        a.version
    );
    let mut s = open_alone(&a.db, &why).await?;
    let rows = match s.has_history().await {
        Ok(true) => s.history().await,
        Ok(false) => Ok(Vec::new()),
        Err(e) => Err(e),
    };
    let rows = rows.map_err(|e| database(format!("failed to read {}", history::TABLE), e))?;
    let row = rows.iter().find(|r| r.version == a.version);
    let from = row.map(|r| r.state);
    let from_text = row.map_or("", |r| r.state_text.as_str());
    let to = match transition(from, to_event) {
        Ok(Some(to)) => to,
        Ok(None) => return Err(RunnerError::NoTransition),
        Err(why) => {
            let why = format!("cannot resolve V{}: {why}", a.version);
            eprintln!("bloodraven-migrate: {why}");
            return Err(RunnerError::Refused(why));
        }
    };
    match s.resolve_row(a.version, from_text, to).await {
        Ok(1) => {
            tracing::info!(revision = a.version, state = to.as_str(), "resolved by hand");
            println!("V{}: {} -> {}", a.version, escape(from_text), to.as_str());
            if to == State::RolledBack {
                println!("the next apply runs V{} again", a.version);
            }
            Ok(())
        }
        Ok(_) => {
            let why = format!("V{} changed under us (another resolve?); run status", a.version);
            eprintln!("bloodraven-migrate: {why}");
            Err(RunnerError::Refused(why))
        }
        Err(e) => Err(database(format!("failed to resolve V{}", a.version), e)),
    }
}

/// `baseline V`: adopts a schema another tool migrated (Flyway's
/// `baseline`). On a history with no row, under the schema's run lock,
/// records one `baseline` row at V; `apply` then treats every revision up
/// to V as in place (never run, never checked) and applies those above it.
///
/// Refused (exit 3), with nothing written: a run holds the schema, the
/// history already has rows (a baseline is the first row or none), the
/// history table is another tool's, or the schema holds no table (most
/// likely a wrong URL; `--allow-empty-schema` overrides). Exit 0 on
/// success, 2 for bad flags, 1 when the database fails.
pub async fn baseline(a: BaselineArgs) -> i32 {
    code(baseline_of(a).await)
}

async fn baseline_of(a: BaselineArgs) -> Result<(), RunnerError> {
    if a.description.trim().is_empty() || a.description.chars().count() > 200 || escape(&a.description) != a.description
    {
        let why = "--description must be 1 to 200 characters, without control characters or backslashes";
        eprintln!("bloodraven-migrate: {why}");
        return Err(RunnerError::Usage(why.to_owned()));
    }
    let files = load_dir(a.dir.as_deref())?;
    let why = "cannot take a baseline: a bloodraven-migrate run (connection {holder}) is applying revisions on this schema right now";
    let mut s = open_alone(&a.db, why).await?;
    // Before anything is created: an empty schema is most likely a wrong URL.
    match s.table_count().await {
        Ok(0) if !a.allow_empty_schema => {
            let why = format!(
                "cannot take a baseline: schema {} holds no table, so no revision can be in place (a wrong --database-url?); run apply instead, or pass --allow-empty-schema",
                s.schema
            );
            eprintln!("bloodraven-migrate: {why}");
            return Err(RunnerError::Refused(why));
        }
        Ok(_) => {}
        Err(e) => return Err(database("failed to list the schema's tables".into(), e)),
    }
    let rows = match s.has_history().await {
        Ok(true) => s.history().await,
        Ok(false) => s.ensure_history().await.map(|()| Vec::new()),
        Err(e) => Err(e),
    };
    let rows = match rows {
        Ok(r) => r,
        Err(e @ DbError::ForeignHistory { .. }) => {
            eprintln!("bloodraven-migrate: cannot take a baseline: {e}");
            return Err(RunnerError::NotOurHistory(e));
        }
        Err(e) => return Err(database(format!("failed to read {}", history::TABLE), e)),
    };
    // A baseline is the history's first row or none (history.rs, `transition`).
    if let Err(why) = transition(rows.first().map(|r| r.state), Event::Baselined) {
        let first =
            rows.first().map_or_else(String::new, |r| format!(" (V{} is {})", r.version, escape(&r.state_text)));
        let why = format!(
            "cannot take a baseline: the history already has {} row(s){first}: {why}; a baseline is only taken before this runner has recorded anything — run status",
            rows.len()
        );
        eprintln!("bloodraven-migrate: {why}");
        return Err(RunnerError::Refused(why));
    }
    if let Err(e) = s.write_baseline(a.version, a.description.trim()).await {
        return Err(database("failed to record the baseline".into(), e));
    }
    tracing::info!(revision = a.version, "baseline recorded by hand");
    println!("baseline V{}: revisions up to V{} count as in place and are never run", a.version, a.version);
    if let Some(files) = files {
        let (covered, above): (Vec<_>, Vec<_>) = files.iter().partition(|f| f.version <= a.version);
        let list = |v: &[&crate::revision::Revision]| {
            v.iter().map(|f| format!("V{}", f.version)).collect::<Vec<_>>().join(" ")
        };
        println!("covered by the baseline: {}", if covered.is_empty() { "none".into() } else { list(&covered) });
        println!("apply will run: {}", if above.is_empty() { "none".into() } else { list(&above) });
    }
    Ok(())
}

/// `diagnose`: open and idle transactions with their age, the lock-wait graph.
pub async fn diagnose(db: DbArgs) -> i32 {
    code(diagnose_of(db).await)
}

async fn diagnose_of(db: DbArgs) -> Result<(), RunnerError> {
    let mut s = open(&db).await?;
    match blockers::diagnose(&mut s).await {
        Ok(d) => {
            print!("{d}");
            Ok(())
        }
        Err(e) => {
            eprintln!("bloodraven-migrate: failed to read the lock information (the account needs PROCESS): {e}");
            Err(RunnerError::Diagnose(e))
        }
    }
}
