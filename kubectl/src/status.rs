//! `status [GROUP]`: one screen per group, one line per group without a
//! name; `-o json|yaml`; `--watch` prints again whenever what it shows
//! changes.

use std::time::Duration;

use bloodraven_api::v1alpha1::{Condition, MysqlFailoverGroup, PhaseTransition, PlannedFailoverAdmission};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use serde::Serialize;

use crate::kube_ctx::{Ctx, access};
use crate::leases::{self, Leases};
use crate::operation::Kind;
use crate::output::{Format, Paint, Table, cell, printable, render_as, short_duration};

/// A site as status shows it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SiteReport {
    pub name: String,
    pub endpoint: String,
    /// `primary` (the decided active site) or `replica`.
    pub role: String,
    #[serde(flatten)]
    pub health: Option<bloodraven_api::v1alpha1::SiteHealth>,
}

/// The operation in flight, or the last one.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OperationReport {
    /// `switchover` (a planned failover), `ordered-update` or `restore-in-place`.
    pub kind: String,
    pub request_id: String,
    pub phase: String,
    pub in_flight: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_site: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission: Option<PlannedFailoverAdmission>,
}

/// What `status GROUP` shows, and `-o json|yaml` prints.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GroupReport {
    pub name: String,
    pub active_site: Option<String>,
    pub topology_generation: Option<i64>,
    pub stable: Option<bool>,
    pub unstable_reason: Option<String>,
    /// The plain words behind `unstableReason`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unstable_message: Option<String>,
    pub automatic_failover: bool,
    pub sites: Vec<SiteReport>,
    pub conditions: Vec<Condition>,
    /// `None` with `leasesError` when the deploy Leases may not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leases: Option<Leases>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leases_error: Option<String>,
    pub operations: Vec<OperationReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emergency_failover: Option<bloodraven_api::v1alpha1::EmergencyFailoverStatus>,
}

impl GroupReport {
    pub fn in_flight(&self) -> Option<&OperationReport> {
        self.operations.iter().find(|o| o.in_flight)
    }
}

fn since(history: &[PhaseTransition], phase: &str) -> Option<String> {
    history.iter().rev().find(|t| t.phase == phase).map(|t| t.time.0.to_string())
}

/// The operations a group's status records.
pub(crate) fn operations(g: &MysqlFailoverGroup) -> Vec<OperationReport> {
    Kind::ALL
        .into_iter()
        .filter_map(|k| {
            let (id, phase, history, admission, message) = k.status(g)?;
            Some(OperationReport {
                kind: k.as_str().into(),
                request_id: id.into(),
                phase: phase.into(),
                in_flight: k.in_flight(phase),
                target_site: k.target(g),
                since: since(history, phase),
                message: message.map(str::to_owned),
                admission: admission.cloned(),
            })
        })
        .collect()
}

pub(crate) fn condition<'a>(g: &'a MysqlFailoverGroup, type_: &str) -> Option<&'a Condition> {
    g.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
}

/// Plain words for an `unstableReason`: the message of the condition of
/// that name when there is one, else what the reason means.
fn unstable_words(g: &MysqlFailoverGroup, reason: &str) -> String {
    if let Some(c) = condition(g, reason).filter(|c| !c.message.is_empty()) {
        return c.message.clone();
    }
    match reason {
        "OperationInProgress" => "a planned operation (switchover, ordered update, restore-in-place) is running".into(),
        "NotObserved" => "the operator has not observed the group yet (is it running?)".into(),
        "BootstrapPending" => "bootstrap has not completed: no active site is decided yet".into(),
        "Degraded" => "a site is unreachable or cannot be observed".into(),
        other => format!("{other} (see the conditions)"),
    }
}

pub(crate) fn report(g: &MysqlFailoverGroup, leases: Result<Leases, String>) -> GroupReport {
    let status = g.status.clone().unwrap_or_default();
    let sites = g
        .spec
        .sites
        .iter()
        .map(|s| SiteReport {
            name: s.name.clone(),
            endpoint: format!("{}:{}", s.host, s.port),
            role: if status.active_site.as_deref() == Some(s.name.as_str()) { "primary" } else { "replica" }.into(),
            health: status.health.iter().find(|h| h.site == s.name).cloned(),
        })
        .collect();
    let (leases, leases_error) = match leases {
        Ok(l) => (Some(l), None),
        Err(e) => (None, Some(e)),
    };
    GroupReport {
        name: g.name_any(),
        active_site: status.active_site.clone(),
        topology_generation: status.topology_generation,
        stable: status.stable,
        unstable_message: status.unstable_reason.as_deref().map(|r| unstable_words(g, r)),
        unstable_reason: status.unstable_reason.clone(),
        automatic_failover: g.spec.failover.automatic,
        sites,
        conditions: status.conditions.clone(),
        leases,
        leases_error,
        operations: operations(g),
        emergency_failover: status.emergency_failover.clone(),
    }
}

fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    }
}

/// Whether a condition's status is the healthy one (only `Ready` is good when True).
fn healthy(c: &Condition) -> bool {
    (c.type_ == "Ready") == (c.status == "True")
}

fn ago(t: &str, now: Timestamp) -> String {
    t.parse::<Timestamp>()
        .map_or_else(|_| cell(t), |t| format!("{} ago", short_duration(now.duration_since(t).as_secs())))
}

/// One line on an operation: `switchover r-1 → pdx: Deferred (12s ago)`.
pub(crate) fn operation_line(o: &OperationReport, now: Timestamp) -> String {
    let target = o.target_site.as_deref().map_or(String::new(), |t| format!(" → {}", cell(t)));
    let since = o.since.as_deref().map_or(String::new(), |s| format!(" ({})", ago(s, now)));
    format!("{} {}{target}: {}{since}", o.kind, cell(&o.request_id), cell(&o.phase))
}

/// The screen of one group.
pub(crate) fn render(r: &GroupReport, paint: Paint, now: Timestamp) -> String {
    let mut out: Vec<String> = Vec::new();
    render_header(&mut out, r, paint);
    render_sites(&mut out, r, paint, now);
    render_leases(&mut out, r, paint, now);
    render_operations(&mut out, r, paint, now);
    out.concat()
}

fn render_header(out: &mut Vec<String>, r: &GroupReport, paint: Paint) {
    let line = |out: &mut Vec<String>, k: &str, v: String| out.push(format!("{:<20}{v}\n", format!("{k}:")));
    line(out, "Group", paint.bold(&cell(&r.name)));
    line(
        out,
        "Active site",
        match (&r.active_site, r.topology_generation) {
            (Some(a), Some(g)) => format!("{} (topology generation {g})", cell(a)),
            _ => paint.warn("none decided yet (bootstrap pending)"),
        },
    );
    let stable = match (r.stable, &r.unstable_reason) {
        (Some(true), _) => paint.good("yes"),
        (_, Some(reason)) => {
            format!("{}: {} — {}", paint.bad("no"), cell(reason), cell(r.unstable_message.as_deref().unwrap_or("")))
        }
        _ => paint.warn("unknown (not observed yet)"),
    };
    line(out, "Stable", stable);
    line(
        out,
        "Automatic failover",
        if r.automatic_failover { "on".into() } else { paint.warn("off (spec.failover.automatic: false)") },
    );
}

fn render_sites(out: &mut Vec<String>, r: &GroupReport, paint: Paint, now: Timestamp) {
    out.push("\nSites:\n".to_owned());
    let mut t =
        Table::new(&["SITE", "ENDPOINT", "ROLE", "REACHABLE", "WRITABLE", "REPLICATING", "LAG", "GTID", "CHANGED"]);
    for s in &r.sites {
        let h = s.health.as_ref();
        let reachable = match h.map(|h| h.reachable) {
            Some(true) => paint.good("yes"),
            Some(false) => {
                paint.bad(&format!("no ({})", cell(h.and_then(|h| h.error_reason.as_deref()).unwrap_or("?"))))
            }
            None => "-".into(),
        };
        t.row(vec![
            cell(&s.name),
            cell(&s.endpoint),
            if s.role == "primary" { paint.bold("primary") } else { s.role.clone() },
            reachable,
            yes_no(h.and_then(|h| h.writable)).into(),
            yes_no(h.and_then(|h| h.replication_running)).into(),
            h.and_then(|h| h.replication_lag_seconds).map_or("-".into(), |l| format!("{l}s")),
            cell(h.and_then(|h| h.gtid_position.as_deref()).filter(|p| !p.is_empty()).unwrap_or("-")),
            h.and_then(|h| h.last_probe_time.as_ref()).map_or("-".into(), |t| ago(&t.0.to_string(), now)),
        ]);
    }
    out.push(t.render(2));
    for s in &r.sites {
        if let Some(errant) = s.health.as_ref().and_then(|h| h.errant_gtids.as_deref()) {
            out.push(format!("  {} {}: {}\n", paint.bad("errant GTIDs on"), cell(&s.name), cell(errant)));
        }
    }
    out.push("\nConditions:\n".to_owned());
    let mut t = Table::new(&["TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"]);
    for c in &r.conditions {
        let status = if healthy(c) { paint.good(&cell(&c.status)) } else { paint.bad(&cell(&c.status)) };
        t.row(vec![
            cell(&c.type_),
            status,
            cell(&c.reason),
            ago(&c.last_transition_time.0.to_string(), now),
            cell(&c.message),
        ]);
    }
    out.push(if t.is_empty() { "  none reported yet\n".into() } else { t.render(2) });
}

fn render_leases(out: &mut Vec<String>, r: &GroupReport, paint: Paint, now: Timestamp) {
    out.push("\nDeploy leases:\n".to_owned());
    match (&r.leases, &r.leases_error) {
        (Some(l), _) if l.grants.is_empty() => out.push("  none held\n".to_owned()),
        (Some(l), _) => out.push(leases::grants_table(l, paint, now).render(2)),
        (None, Some(e)) => out.push(format!("  {}\n", paint.warn(&cell(e)))),
        (None, None) => {}
    }
    if let Some(l) = r.leases.as_ref().filter(|l| !l.pending_verifications.is_empty()) {
        let ops: Vec<String> = l.pending_verifications.iter().map(|v| cell(&v.operation_id)).collect();
        out.push(format!(
            "  {} {} (kubectl bloodraven verify-schema {} OPERATION...)\n",
            paint.warn("schema to verify after:"),
            ops.join(", "),
            cell(&r.name)
        ));
    }
}

fn render_operations(out: &mut Vec<String>, r: &GroupReport, paint: Paint, now: Timestamp) {
    out.push("\nOperation:\n".to_owned());
    match r.in_flight() {
        Some(o) => {
            out.push(format!("  {}\n", paint.bold(&operation_line(o, now))));
            if let Some(a) = &o.admission {
                let why = a.defer_reason.as_deref().unwrap_or("-");
                let until =
                    a.retry_time.as_ref().map_or(String::new(), |t| format!("; admission tried again at {}", t.0));
                out.push(format!("  deferred by {}: {}{until}\n", cell(why), cell(a.message.as_deref().unwrap_or(""))));
            }
            // A deferred request's message repeats its admission's.
            if let Some(m) =
                o.message.as_ref().filter(|m| o.admission.as_ref().and_then(|a| a.message.as_ref()) != Some(*m))
            {
                out.push(format!("  {}\n", cell(m)));
            }
        }
        None => out.push("  none in flight\n".to_owned()),
    }
    for o in r.operations.iter().filter(|o| !o.in_flight) {
        out.push(format!("  last: {}\n", operation_line(o, now)));
        if let Some(m) = o.message.as_ref().filter(|_| o.phase == "Failed") {
            out.push(format!("        {}\n", cell(m)));
        }
    }
    if let Some(e) = &r.emergency_failover {
        out.push(format!(
            "\nLast emergency failover: {} → {} at {} (generation {}), {} transaction(s) abandoned\n",
            cell(&e.from_site),
            cell(&e.to_site),
            e.time.0,
            e.topology_generation,
            e.abandoned_transactions
        ));
    }
}

/// One line per group.
fn list_table(groups: &[MysqlFailoverGroup], paint: Paint, now: Timestamp) -> Table {
    let mut t = Table::new(&["NAME", "ACTIVE", "GENERATION", "READY", "STABLE", "REASON", "OPERATION", "AGE"]);
    for g in groups {
        let s = g.status.clone().unwrap_or_default();
        let ready = condition(g, "Ready").map_or("-".to_owned(), |c| {
            if c.status == "True" { paint.good("True") } else { paint.bad(&cell(&c.status)) }
        });
        let op = operations(g).into_iter().find(|o| o.in_flight).map_or("-".to_owned(), |o| {
            format!(
                "{} {}{}",
                o.kind,
                cell(&o.phase),
                o.target_site.map_or(String::new(), |t| format!(" → {}", cell(&t)))
            )
        });
        t.row(vec![
            cell(&g.name_any()),
            cell(s.active_site.as_deref().unwrap_or("-")),
            s.topology_generation.map_or("-".into(), |n| n.to_string()),
            ready,
            match s.stable {
                Some(true) => "True".into(),
                Some(false) => paint.bad("False"),
                None => "-".into(),
            },
            cell(s.unstable_reason.as_deref().unwrap_or("-")),
            op,
            g.metadata
                .creation_timestamp
                .as_ref()
                .map_or("-".into(), |c| short_duration(now.duration_since(c.0).as_secs())),
        ]);
    }
    t
}

async fn one(ctx: &Ctx, name: &str) -> anyhow::Result<GroupReport> {
    let g = ctx.group(name).await?;
    let leases = leases::read(ctx, &g).await.map_err(|e| format!("{e:#}"));
    Ok(report(&g, leases))
}

async fn all(ctx: &Ctx) -> anyhow::Result<Vec<MysqlFailoverGroup>> {
    let list = ctx
        .groups()
        .list(&kube::api::ListParams::default())
        .await
        .map_err(|e| access(e, "list", "mysqlfailovergroups.bloodraven.shipstream.io", None))?;
    Ok(list.items)
}

/// What one round prints.
async fn frame(ctx: &Ctx, group: Option<&str>, format: Option<Format>, paint: Paint) -> anyhow::Result<String> {
    let now = Timestamp::now();
    Ok(match (group, format) {
        (Some(name), None) => render(&one(ctx, name).await?, paint, now),
        (Some(name), Some(f)) => render_as(&one(ctx, name).await?, f)?,
        (None, None) => {
            let groups = all(ctx).await?;
            if groups.is_empty() {
                "No MysqlFailoverGroup found.\n".into()
            } else {
                list_table(&groups, paint, now).render(0)
            }
        }
        (None, Some(f)) => {
            let mut reports = Vec::new();
            for g in all(ctx).await? {
                let leases = leases::read(ctx, &g).await.map_err(|e| format!("{e:#}"));
                reports.push(report(&g, leases));
            }
            render_as(&reports, f)?
        }
    })
}

/// `status [GROUP] [-o json|yaml] [--watch]`.
pub(crate) async fn run(ctx: &Ctx, group: Option<&str>, format: Option<Format>, watch: bool) -> anyhow::Result<u8> {
    let paint = Paint::stdout();
    if !watch {
        print!("{}", frame(ctx, group, format, paint).await?);
        return Ok(0);
    }
    // Read again every second (every two for all groups) rather than
    // watched: `get` is all a named group needs, and the leases' time left
    // moves without any event.
    let every = if group.is_some() { Duration::from_secs(1) } else { Duration::from_secs(2) };
    // The first frame fails as a plain `status` does (no such group, no
    // permission); later failed reads are said once and tried again.
    let mut last = frame(ctx, group, format, paint).await?;
    print!("{last}");
    let mut last_error = String::new();
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = tokio::signal::ctrl_c() => return Ok(0),
        }
        match frame(ctx, group, format, paint).await {
            // The clock moves every "ago": a frame is printed again only
            // when it changed apart from its ages.
            Ok(shown) if strip_ages(&shown) != strip_ages(&last) => {
                println!("{}", if format == Some(Format::Yaml) { "---" } else { "" });
                print!("{shown}");
                last = shown;
                last_error.clear();
            }
            Ok(_) => last_error.clear(),
            Err(e) => {
                let e = printable(&format!("{e:#}"));
                if e != last_error {
                    eprintln!("{e}; reading again");
                    last_error = e;
                }
            }
        }
    }
}

/// `s` without the ages and times left it shows (`12s ago`, `(12s ago)`,
/// `in 3m12s`), which move with the clock alone; every other number (a
/// lag, a generation) stays, so a change of it is a change of the frame.
fn strip_ages(s: &str) -> String {
    let is_age = |w: &str| {
        let w = w.trim_matches(|c| c == '(' || c == ')' || c == ',' || c == ';');
        w.starts_with(|c: char| c.is_ascii_digit())
            && w.ends_with(['s', 'm', 'h', 'd'])
            && w.chars().all(|c| c.is_ascii_digit() || "smhd".contains(c))
    };
    let words: Vec<&str> = s.split_whitespace().collect();
    let mut kept = Vec::with_capacity(words.len());
    for (i, w) in words.iter().enumerate() {
        let before_ago = words.get(i + 1).is_some_and(|n| n.trim_end_matches([')', ',', ';']) == "ago");
        let after_in = i > 0 && words[i - 1] == "in";
        if is_age(w) && (before_ago || after_in) {
            continue;
        }
        kept.push(*w);
    }
    kept.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(status: &serde_json::Value) -> MysqlFailoverGroup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlFailoverGroup",
            "metadata": {"name": "g", "uid": "u1"},
            "spec": {"sites": [
                {"name": "iad", "host": "10.0.0.1", "port": 3306, "credentialsSecretRef": {"namespace": "b", "name": "s"}},
                {"name": "pdx", "host": "10.0.0.2", "port": 3306, "credentialsSecretRef": {"namespace": "b", "name": "s"}}
            ], "initialActiveSite": "iad"},
            "status": status
        }))
        .unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn a_deferred_switchover_and_an_unstable_group_in_one_screen() {
        let g = group(&serde_json::json!({
            "activeSite": "iad", "topologyGeneration": 4, "stable": false, "unstableReason": "OperationInProgress",
            "health": [{"site": "iad", "reachable": true, "writable": true, "gtidPosition": "0-1-9"},
                       {"site": "pdx", "reachable": false, "errorReason": "SiteUnreachable"}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "AsExpected", "message": "ok\u{1b}[2J",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "plannedFailover": {"requestId": "r-1", "targetSite": "pdx", "phase": "Deferred",
                "admission": {"deferReason": "DeploymentHold", "message": "held by op-7 (instance app)"},
                "history": [{"phase": "Deferred", "time": "2026-01-01T00:00:50Z"}]}
        }));
        let r = report(&g, Err("leases: forbidden".into()));
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().unwrap_or_else(|e| unreachable!("{e}"));
        let screen = render(&r, Paint::stdout(), now);
        for want in [
            "iad (topology generation 4)",
            "no: OperationInProgress — a planned operation",
            "no (SiteUnreachable)",
            "switchover r-1 → pdx: Deferred (10s ago)",
            "deferred by DeploymentHold: held by op-7 (instance app)",
            "leases: forbidden",
            "ok\\u{1b}[2J",
        ] {
            assert!(screen.contains(want), "{want:?} not in\n{screen}");
        }
        assert!(!screen.contains('\x1b') || std::io::IsTerminal::is_terminal(&std::io::stdout()));
        assert_eq!(r.in_flight().map(|o| o.kind.as_str()), Some("switchover"));
    }

    #[test]
    fn ages_do_not_count_as_changes() {
        assert_eq!(strip_ages("Deferred (10s ago) in 20s"), strip_ages("Deferred (11s ago) in 19s"));
        assert_ne!(strip_ages("Deferred (10s ago)"), strip_ages("Draining (10s ago)"));
        assert_ne!(
            strip_ages("pdx replica yes 3s 0-1-9 5s ago"),
            strip_ages("pdx replica yes 4s 0-1-9 5s ago"),
            "a lag"
        );
    }
}
