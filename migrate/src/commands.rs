//! `status`, `resolve` and `diagnose`: a person's tools, on the same
//! database flags as `apply`.

use std::time::Duration;

use crate::apply::exit;
use crate::blockers;
use crate::config::{DbArgs, ResolveArgs, StatusArgs};
use crate::db::{Session, Target};
use crate::history::{self, Event, State, transition};

/// Their session: the runner's lock timeout (5 s) and a 10-minute idle bound.
async fn open(db: &DbArgs) -> Result<Session, i32> {
    let target = Target::from_args(db).map_err(|e| {
        eprintln!("bloodraven-migrate: {e}");
        exit::USAGE
    })?;
    target.connect(Some(Duration::from_secs(5)), Duration::from_secs(600)).await.map_err(|e| {
        eprintln!("bloodraven-migrate: {e}");
        exit::FAILED
    })
}

/// `status`: one line per history row, and with `--dir` the pending and
/// changed revisions. Exit 0, or 3 when the history would refuse `apply`.
pub async fn status(a: StatusArgs) -> i32 {
    let files = match a.dir.as_deref().map(crate::revision::load_dir).transpose() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("bloodraven-migrate: {e}");
            return exit::USAGE;
        }
    };
    let mut s = match open(&a.db).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    let rows = match s.has_history().await {
        Ok(false) => Vec::new(),
        Ok(true) => match s.history().await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("bloodraven-migrate: failed to read {}: {e}", history::TABLE);
                return exit::FAILED;
            }
        },
        Err(e) => {
            eprintln!("bloodraven-migrate: {e}");
            return exit::FAILED;
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
            r.state_text,
            r.ddl_started,
            r.attempts,
            r.started_at,
            r.finished_at.as_deref().unwrap_or("-"),
            r.description
        );
    }
    let Some(files) = files else { return exit::OK };
    match history::plan(&files, &rows) {
        Ok(p) => {
            for r in &p.pending {
                println!(
                    "V{:<7} {:<12} {:<10} {:<8} {:<26} {:<26} {}",
                    r.version, "pending", "-", "-", "-", "-", r.description
                );
            }
            exit::OK
        }
        Err(e) => {
            println!("apply would refuse: {e}");
            exit::REFUSED
        }
    }
}

/// `resolve V --applied|--rolled-back`.
pub async fn resolve(a: ResolveArgs) -> i32 {
    let to_event = if a.applied { Event::ResolvedApplied } else { Event::ResolvedRolledBack };
    let mut s = match open(&a.db).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    // A `started` row of a run in progress is not dirty: settle only when no run holds the schema.
    match s.try_run_lock(Duration::ZERO).await {
        Ok(None) => {}
        Ok(Some(holder)) => {
            eprintln!(
                "bloodraven-migrate: cannot resolve V{}: a bloodraven-migrate run (connection {holder}) is applying revisions on this schema right now, so a `started` row may be running, not dirty; wait for it to end",
                a.version
            );
            return exit::REFUSED;
        }
        Err(e) => {
            eprintln!("bloodraven-migrate: failed to take the schema's run lock: {e}");
            return exit::FAILED;
        }
    }
    let rows = match s.has_history().await {
        Ok(true) => s.history().await,
        Ok(false) => Ok(Vec::new()),
        Err(e) => Err(e),
    };
    let rows = match rows {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bloodraven-migrate: failed to read {}: {e}", history::TABLE);
            return exit::FAILED;
        }
    };
    let row = rows.iter().find(|r| r.version == a.version);
    let from = row.map(|r| r.state);
    let from_text = row.map_or("", |r| r.state_text.as_str());
    let to = match transition(from, to_event) {
        Ok(Some(to)) => to,
        Ok(None) => return exit::FAILED,
        Err(why) => {
            eprintln!("bloodraven-migrate: cannot resolve V{}: {why}", a.version);
            return exit::REFUSED;
        }
    };
    match s.resolve_row(a.version, from_text, to).await {
        Ok(1) => {
            tracing::info!(revision = a.version, state = to.as_str(), "resolved by hand");
            println!("V{}: {from_text} -> {}", a.version, to.as_str());
            if to == State::RolledBack {
                println!("the next apply runs V{} again", a.version);
            }
            exit::OK
        }
        Ok(_) => {
            eprintln!("bloodraven-migrate: V{} changed under us (another resolve?); run status", a.version);
            exit::REFUSED
        }
        Err(e) => {
            eprintln!("bloodraven-migrate: failed to resolve V{}: {e}", a.version);
            exit::FAILED
        }
    }
}

/// `diagnose`: open and idle transactions with their age, the lock-wait graph.
pub async fn diagnose(db: DbArgs) -> i32 {
    let mut s = match open(&db).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    match blockers::diagnose(&mut s).await {
        Ok(d) => {
            print!("{d}");
            exit::OK
        }
        Err(e) => {
            eprintln!("bloodraven-migrate: failed to read the lock information (the account needs PROCESS): {e}");
            exit::FAILED
        }
    }
}
