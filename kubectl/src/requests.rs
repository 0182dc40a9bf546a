//! The commands that ask the operator for something by writing the group:
//! `switchover` (a planned failover request in spec), `revoke` and
//! `verify-schema` (annotations, with who asked). Each then follows what
//! the operator does, with progress on standard error and the outcome on
//! standard output and in the exit code.

use std::time::{Duration, Instant};

use bloodraven_api::names::{
    REVOKE_DEPLOYMENT_LEASES_ANNOTATION, REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION, SCHEMA_VERIFIED_ANNOTATION,
    SCHEMA_VERIFIED_BY_ANNOTATION,
};
use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt as _;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::kube_ctx::{Ctx, access, whoami};
use crate::leases;
use crate::operation::Kind;
use crate::output::{cell, printable};
use crate::status::{self, operation_line};
use crate::{EXIT_FAILED, EXIT_TIMEOUT};

const GROUPS: &str = "mysqlfailovergroups.bloodraven.shipstream.io";
/// The longest reason `revoke` writes (it is shown in Events).
const MAX_REASON_CHARS: usize = 256;

/// A request id is 1–128 characters of `[A-Za-z0-9._:-]` (the CRD's rule).
fn valid_request_id(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
}

/// A fresh request id: the time and a random suffix, so two people asking
/// in the same second still make two requests.
fn fresh_request_id(now: Timestamp) -> String {
    let stamp = now.strftime("%Y%m%dt%H%M%Sz").to_string();
    format!("switchover-{stamp}-{:06x}", rand::random::<u32>() & 0x00ff_ffff)
}

/// What a command decided to write, given the group as read.
enum Decision {
    /// A merge patch of the group.
    Write(serde_json::Value),
    /// Nothing to write; this is why.
    Nothing(String),
}

/// How often a decision is made again after the group changed under it.
const WRITE_ATTEMPTS: usize = 8;

/// Reads the group, lets `decide` check it and say what to write, and
/// writes that as a merge patch conditional on the resourceVersion read:
/// a concurrent change never gets overwritten. The operator writes status
/// on every change it observes, which moves the resourceVersion too, so a
/// conflict reads the group again and decides again (another person's
/// request, now visible, is then refused by `decide`). Returns the group as
/// read for the write, or why nothing was written.
async fn write_checked(
    ctx: &Ctx,
    group: &str,
    mut decide: impl FnMut(&MysqlFailoverGroup) -> anyhow::Result<Decision>,
) -> anyhow::Result<Result<MysqlFailoverGroup, String>> {
    for _ in 0..WRITE_ATTEMPTS {
        let g = ctx.group(group).await?;
        let mut body = match decide(&g)? {
            Decision::Write(body) => body,
            Decision::Nothing(why) => return Ok(Err(why)),
        };
        body["metadata"]["resourceVersion"] = json!(g.resource_version());
        match ctx.groups().patch(group, &PatchParams::default(), &Patch::Merge(&body)).await {
            Ok(_) => return Ok(Ok(g)),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(kube::Error::Api(s))
                if s.code == 422 || s.code == 400 || (s.code == 403 && s.reason != "Forbidden") =>
            {
                anyhow::bail!("the API server refused the request: {}", printable(&s.message))
            }
            Err(e) => return Err(access(e, "patch", GROUPS, None)),
        }
    }
    anyhow::bail!(
        "group {group} kept changing while this request was being written ({WRITE_ATTEMPTS} tries); look again with `kubectl bloodraven status {group}` and retry"
    )
}

/// What a followed request has come to.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Completed(String),
    Failed(String),
}

/// `switchover GROUP --to SITE [--wait]`.
pub(crate) async fn switchover(
    ctx: &Ctx,
    group: &str,
    to: &str,
    request_id: Option<String>,
    wait: Option<Duration>,
) -> anyhow::Result<u8> {
    let id = match request_id {
        Some(id) if valid_request_id(&id) => id,
        Some(id) => anyhow::bail!("--request-id {:?}: 1–128 characters of [A-Za-z0-9._:-]", printable(&id)),
        None => fresh_request_id(Timestamp::now()),
    };
    let mut from = String::new();
    let written = write_checked(ctx, group, |g| {
        let decision = switchover_decision(g, to, &id)?;
        from = g.decided().map_or("-".into(), |(a, _)| a.to_owned());
        Ok(decision)
    })
    .await?;
    let g = match written {
        Ok(g) => g,
        Err(why) => {
            println!("{why}");
            return Ok(0);
        }
    };
    println!("switchover {id} requested: group {group}, {from} → {to}");
    let Some(limit) = wait else { return Ok(0) };
    follow(ctx, &g, Kind::Switchover, &id, limit).await
}

/// What `switchover` writes on `g`, or why it refuses.
fn switchover_decision(g: &MysqlFailoverGroup, to: &str, id: &str) -> anyhow::Result<Decision> {
    let group = g.name_any();
    if g.site(to).is_none() {
        let sites: Vec<&str> = g.spec.sites.iter().map(|s| s.name.as_str()).collect();
        anyhow::bail!("group {group} has no site {:?}; its sites are {}", printable(to), sites.join(", "));
    }
    if let Some(o) = status::operations(g).into_iter().find(|o| o.in_flight) {
        anyhow::bail!(
            "{} is in flight on group {group}; one operation at a time (follow it: kubectl bloodraven status {group} --watch)",
            operation_line(&o, Timestamp::now())
        );
    }
    if let Some((kind, pending)) = not_taken_up(g) {
        anyhow::bail!(
            "{} {pending} is requested on group {group} and the operator has not taken it up yet (is it running?); \
             one operation at a time, and a request is never replaced (follow it: kubectl bloodraven wait {group})",
            kind.as_str()
        );
    }
    let Some((active, generation)) = g.decided() else {
        anyhow::bail!("group {group} has no decided active site yet (bootstrap pending): nothing to switch over from");
    };
    if active == to {
        return Ok(Decision::Nothing(format!(
            "{to} is already the active site of group {group} (topology generation {generation}); nothing to do"
        )));
    }
    if Kind::Switchover.requested(g) == Some(id) || taken_up(g, Kind::Switchover, id) {
        anyhow::bail!("request id {id} was already used on group {group}; a new request needs a new id");
    }
    Ok(Decision::Write(json!({"spec": {"plannedFailover": {"targetSite": to, "requestId": id}}})))
}

/// Whether the operator took up request `id` of `kind` (its status, or
/// its `ignored…` status, names it).
fn taken_up(g: &MysqlFailoverGroup, kind: Kind, id: &str) -> bool {
    kind.status(g).is_some_and(|s| s.0 == id) || kind.ignored(g).is_some_and(|i| i.request_id == id)
}

/// A request in spec the operator has not taken up yet (it is down, or has
/// not looked since it was written).
fn not_taken_up(g: &MysqlFailoverGroup) -> Option<(Kind, String)> {
    Kind::ALL.into_iter().find_map(|k| k.requested(g).filter(|id| !taken_up(g, k, id)).map(|id| (k, id.to_owned())))
}

/// Which request `wait` follows: the one named (in spec or status), else
/// the one in flight, else one in spec the operator has not taken up yet.
fn pick(g: &MysqlFailoverGroup, request_id: Option<&str>) -> Option<(Kind, String)> {
    let in_status = |k: Kind, id: &str| taken_up(g, k, id);
    match request_id {
        Some(id) => {
            Kind::ALL.into_iter().find(|&k| in_status(k, id) || k.requested(g) == Some(id)).map(|k| (k, id.to_owned()))
        }
        None => Kind::ALL
            .into_iter()
            .find_map(|k| k.status(g).filter(|s| k.in_flight(s.1)).map(|s| (k, s.0.to_owned())))
            .or_else(|| not_taken_up(g)),
    }
}

/// `wait GROUP [--request-id ID]`: follows an operation started some other
/// way (an ordered update or a restore-in-place applied with kubectl, a
/// switchover written by a pipeline): the one named, else the one in
/// flight, else a request in spec the operator has not taken up yet.
pub(crate) async fn wait(ctx: &Ctx, group: &str, request_id: Option<&str>, limit: Duration) -> anyhow::Result<u8> {
    let g = ctx.group(group).await?;
    let found = pick(&g, request_id);
    let Some((kind, id)) = found else {
        if let Some(id) = request_id {
            anyhow::bail!("group {group} has no request {:?} in spec or status", printable(id));
        }
        println!("Nothing is in flight or requested on group {group}: nothing to wait for.");
        return Ok(0);
    };
    eprintln!("following {} {id} on group {group}", kind.as_str());
    follow(ctx, &g, kind, &id, limit).await
}

/// A line of progress and what makes it new: a phase entered is new once
/// (its phase and time), a deferral when its holder changes (a renewal
/// moves the retry time, which is not news).
type Line = (String, String);

/// The request `id` of `kind` as the group's status has it: its phases so
/// far (the new ones are printed), and its outcome once final.
fn progress(g: &MysqlFailoverGroup, kind: Kind, id: &str) -> (Vec<Line>, Option<Outcome>) {
    let what = kind.as_str();
    if let Some(ignored) = kind.ignored(g).filter(|i| i.request_id == id) {
        return (
            Vec::new(),
            Some(Outcome::Failed(format!(
                "{what} {id} was not taken up ({}): {}",
                cell(&ignored.reason),
                cell(&ignored.message)
            ))),
        );
    }
    let Some((_, phase, history, admission, message)) = kind.status(g).filter(|s| s.0 == id) else {
        return (Vec::new(), None);
    };
    let mut lines: Vec<Line> = history
        .iter()
        .map(|t| {
            let detail = t.message.as_deref().map_or(String::new(), |m| format!(": {}", cell(m)));
            (format!("{}@{}", t.phase, t.time.0), format!("{}{detail}", cell(&t.phase)))
        })
        .collect();
    if let Some(a) = admission.filter(|_| phase == "Deferred") {
        let until = a.retry_time.as_ref().map_or(String::new(), |t| format!(", admission tried again at {}", t.0));
        let why =
            format!("{}: {}", cell(a.defer_reason.as_deref().unwrap_or("-")), cell(a.message.as_deref().unwrap_or("")));
        lines.push((format!("deferred {why}"), format!("Deferred by {why}{until}")));
    }
    let outcome = match phase {
        "Completed" if kind.is_final(phase) => {
            let (active, generation) = g.decided().map_or(("?".to_owned(), 0), |(a, n)| (a.to_owned(), n));
            Some(Outcome::Completed(format!(
                "{what} {id} Completed: {} is the active site of group {} at topology generation {generation}",
                cell(&active),
                g.name_any()
            )))
        }
        "Failed" if kind.is_final(phase) => {
            Some(Outcome::Failed(format!("{what} {id} Failed: {}", cell(message.unwrap_or("no message")))))
        }
        _ => None,
    };
    (lines, outcome)
}

/// How often a followed group is read again. Reading (`get`) rather than
/// watching needs no `list` permission, and a phase passed between two
/// reads is still shown: the request's history records every phase.
const POLL: Duration = Duration::from_secs(1);

/// How [`poll`] ended.
enum Polled<T> {
    Done(T, MysqlFailoverGroup),
    TimedOut(MysqlFailoverGroup),
    Interrupted,
}

/// Reads group `g` again every [`POLL`] until `done` answers or `limit`
/// passed. The group deleted, or deleted and re-created under the same
/// name (another UID), ends it with an error: the request went with it.
async fn poll<T>(
    ctx: &Ctx,
    g: &MysqlFailoverGroup,
    limit: Duration,
    mut done: impl FnMut(&MysqlFailoverGroup) -> Option<T>,
) -> anyhow::Result<Polled<T>> {
    let started = Instant::now();
    let name = g.name_any();
    let uid = g.uid();
    let mut last = g.clone();
    let mut told_unreachable = false;
    loop {
        match ctx.groups().get_opt(&name).await {
            Ok(Some(now)) if now.uid() != uid => {
                anyhow::bail!("group {name} was deleted and created again; the request went with the old one")
            }
            Ok(Some(now)) => {
                told_unreachable = false;
                if let Some(t) = done(&now) {
                    return Ok(Polled::Done(t, now));
                }
                last = now;
            }
            Ok(None) => anyhow::bail!("group {name} was deleted"),
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 401 => {
                return Err(access(kube::Error::Api(s), "get", GROUPS, None));
            }
            Err(e) => {
                if !told_unreachable {
                    eprintln!("{}", printable(&format!("cannot read group {name} ({e}); retrying")));
                    told_unreachable = true;
                }
            }
        }
        let left = limit.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Ok(Polled::TimedOut(last));
        }
        tokio::select! {
            () = tokio::time::sleep(POLL.min(left)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(Polled::Interrupted),
        }
    }
}

/// Follows request `id` of `kind` on `g` until it is final or `limit` passed.
async fn follow(ctx: &Ctx, g: &MysqlFailoverGroup, kind: Kind, id: &str, limit: Duration) -> anyhow::Result<u8> {
    let group = g.name_any();
    let mut printed: Vec<String> = Vec::new();
    let polled = poll(ctx, g, limit, |now| {
        let (lines, outcome) = progress(now, kind, id);
        if outcome.is_none() && !taken_up(now, kind, id) && kind.requested(now) != Some(id) {
            // Written over (or removed) before the operator took it up: it
            // will never run, and waiting on would only time out.
            let by = kind
                .requested(now)
                .map_or("removed".to_owned(), |other| format!("replaced by request {}", cell(other)));
            return Some(Outcome::Failed(format!(
                "{} {id} was {by} in the group's spec before the operator took it up; it will never run",
                kind.as_str()
            )));
        }
        for (key, line) in lines {
            if !printed.contains(&key) {
                eprintln!("{}  {line}", Timestamp::now().strftime("%H:%M:%S"));
                printed.push(key);
            }
        }
        outcome
    })
    .await?;
    match polled {
        Polled::Done(Outcome::Completed(m), _) => {
            println!("{m}");
            Ok(0)
        }
        Polled::Done(Outcome::Failed(m), _) => {
            println!("{m}");
            Ok(EXIT_FAILED)
        }
        Polled::TimedOut(now) => {
            let phase = kind.status(&now).filter(|s| s.0 == id).map_or("Pending", |s| s.1);
            eprintln!(
                "still {} after {}s; the request goes on (kubectl bloodraven status {group} --watch)",
                cell(phase),
                limit.as_secs()
            );
            Ok(EXIT_TIMEOUT)
        }
        Polled::Interrupted => {
            eprintln!("interrupted; the request goes on (kubectl bloodraven status {group} --watch)");
            Ok(EXIT_TIMEOUT)
        }
    }
}

/// Waits until the operator removed `annotation` from the group (it acted).
async fn acted(
    ctx: &Ctx,
    g: &MysqlFailoverGroup,
    annotation: &str,
    limit: Duration,
) -> anyhow::Result<Option<MysqlFailoverGroup>> {
    match poll(ctx, g, limit, |now| (!now.annotations().contains_key(annotation)).then_some(())).await? {
        Polled::Done((), now) => Ok(Some(now)),
        Polled::TimedOut(_) | Polled::Interrupted => Ok(None),
    }
}

/// The group read again for a write is the one the leases were read of
/// (not deleted and created again under its name in between).
fn same_group(read: &MysqlFailoverGroup, now: &MysqlFailoverGroup) -> anyhow::Result<()> {
    if read.uid() == now.uid() {
        Ok(())
    } else {
        anyhow::bail!("group {} was deleted and created again meanwhile; run the command again", now.name_any())
    }
}

fn check_reason(reason: &str) -> anyhow::Result<()> {
    if reason.trim().is_empty() {
        anyhow::bail!("--reason: say why, in words (it is shown in the operator's Events)");
    }
    if reason.chars().count() > MAX_REASON_CHARS {
        anyhow::bail!("--reason: at most {MAX_REASON_CHARS} characters");
    }
    if reason.chars().any(char::is_control) {
        anyhow::bail!("--reason: one line of text, without control characters");
    }
    Ok(())
}

/// `revoke GROUP --reason TEXT`.
pub(crate) async fn revoke(ctx: &Ctx, group: &str, reason: &str, limit: Duration) -> anyhow::Result<u8> {
    check_reason(reason)?;
    let g = ctx.group(group).await?;
    let before = leases::read(ctx, &g).await?;
    let live: Vec<&leases::Grant> = before.live().filter(|l| l.revoked.is_none()).collect();
    if live.is_empty() {
        println!("No live deploy lease on group {group}: nothing to revoke.");
        return Ok(0);
    }
    let by = whoami(ctx).await?;
    let body = json!({"metadata": {"annotations": {
        REVOKE_DEPLOYMENT_LEASES_ANNOTATION: reason,
        REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION: by,
    }}});
    let Ok(g) = write_checked(ctx, group, |now| same_group(&g, now).map(|()| Decision::Write(body.clone()))).await?
    else {
        return Ok(0);
    };
    eprintln!("asked the operator to revoke every deploy lease of group {group}; waiting for it to act");
    let Some(after) = acted(ctx, &g, REVOKE_DEPLOYMENT_LEASES_ANNOTATION, limit).await? else {
        eprintln!(
            "the operator has not acted within {}s (is it running, with its deploy API enabled?); the annotation stays until it does",
            limit.as_secs()
        );
        return Ok(EXIT_TIMEOUT);
    };
    let now = leases::read(ctx, &after).await?;
    for l in live {
        let revoked = now.revocations.iter().any(|r| r.operation_id == l.operation_id && r.client == l.client);
        if revoked {
            println!(
                "revoked {} {} (instance {}); its client may run until {}, never renewed",
                cell(&l.kind),
                cell(&l.operation_id),
                cell(&l.instance),
                l.expires_at.as_deref().unwrap_or("-")
            );
        } else {
            println!("{} {} ended before it could be revoked", cell(&l.kind), cell(&l.operation_id));
        }
    }
    if !now.pending_verifications.is_empty() {
        eprintln!(
            "operations that ended inside their DDL await schema verification: kubectl bloodraven verify-schema {group}"
        );
    }
    Ok(0)
}

/// `verify-schema GROUP [OPERATION...|--all]`.
pub(crate) async fn verify_schema(
    ctx: &Ctx,
    group: &str,
    operations: &[String],
    all: bool,
    limit: Duration,
) -> anyhow::Result<u8> {
    let g = ctx.group(group).await?;
    let before = leases::read(ctx, &g).await?;
    let pending = &before.pending_verifications;
    if pending.is_empty() {
        println!("Nothing awaits schema verification on group {group}.");
        return Ok(if operations.is_empty() { 0 } else { EXIT_FAILED });
    }
    if operations.is_empty() && !all {
        println!("Awaiting schema verification on group {group}:");
        print!("{}", leases::verifications_table(&before).render(0));
        println!(
            "\nCheck the schema of each instance, then: kubectl bloodraven verify-schema {group} OPERATION... (or --all)"
        );
        return Ok(0);
    }
    for op in operations {
        if !pending.iter().any(|p| p.operation_id == *op) {
            let awaiting: Vec<&str> = pending.iter().map(|p| p.operation_id.as_str()).collect();
            anyhow::bail!(
                "operation {:?} does not await verification on group {group} (awaiting: {})",
                printable(op),
                awaiting.join(", ")
            );
        }
        if pending.iter().any(|p| p.operation_id == *op && !p.announced) {
            anyhow::bail!(
                "operation {op}'s record was made a moment ago and not announced yet; the operator clears only what it told about: retry in a few seconds"
            );
        }
    }
    // The operationIds themselves, even for --all: `all` would also clear a
    // record announced after the person looked, which nobody checked.
    let named: Vec<String> = if all {
        pending.iter().filter(|p| p.announced).map(|p| p.operation_id.clone()).collect()
    } else {
        operations.to_vec()
    };
    if named.is_empty() {
        anyhow::bail!("nothing announced awaits verification on group {group} yet; retry in a few seconds");
    }
    let value = named.join(",");
    let by = whoami(ctx).await?;
    let body =
        json!({"metadata": {"annotations": {SCHEMA_VERIFIED_ANNOTATION: value, SCHEMA_VERIFIED_BY_ANNOTATION: by}}});
    let Ok(g) = write_checked(ctx, group, |now| same_group(&g, now).map(|()| Decision::Write(body.clone()))).await?
    else {
        return Ok(0);
    };
    eprintln!("recorded that {} verified the schema; waiting for the operator to clear the records", cell(&by));
    let Some(after) = acted(ctx, &g, SCHEMA_VERIFIED_ANNOTATION, limit).await? else {
        eprintln!("the operator has not acted within {}s; the annotation stays until it does", limit.as_secs());
        return Ok(EXIT_TIMEOUT);
    };
    let now = leases::read(ctx, &after).await?;
    let wanted: Vec<&str> = named.iter().map(String::as_str).collect();
    let mut code = 0;
    for op in wanted {
        if now.pending_verifications.iter().any(|p| p.operation_id == op) {
            println!("{}: still awaits verification (see the group's SchemaVerifiedUnmatched Event)", cell(op));
            code = EXIT_FAILED;
        } else {
            println!("{}: schema verified by {}", cell(op), cell(&by));
        }
    }
    // The records are cleared first; the condition follows at the
    // operator's next round, so it is read again until it does (bounded).
    let required = |g: &MysqlFailoverGroup| {
        status::condition(g, "SchemaVerificationRequired").filter(|c| c.status == "True").map(|c| c.message.clone())
    };
    if now.pending_verifications.is_empty() {
        match poll(ctx, &after, limit.min(Duration::from_secs(30)), |g| required(g).is_none().then_some(())).await? {
            Polled::Done(..) => eprintln!("SchemaVerificationRequired is clear"),
            Polled::TimedOut(_) | Polled::Interrupted => {
                eprintln!("the records are cleared; SchemaVerificationRequired clears at the operator's next round");
            }
        }
    } else if let Some(m) = required(&after) {
        eprintln!("SchemaVerificationRequired stays True for the others: {}", cell(&m));
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids() {
        let now: Timestamp = "2026-12-06T16:30:05Z".parse().unwrap_or_else(|e| unreachable!("{e}"));
        let id = fresh_request_id(now);
        assert!(id.starts_with("switchover-20261206t163005z-"), "{id}");
        assert!(valid_request_id(&id), "{id}");
        assert_ne!(fresh_request_id(now), fresh_request_id(now), "two in one second are two requests");
        for bad in ["", "a b", "x/y", &"a".repeat(129), "ü"] {
            assert!(!valid_request_id(bad), "{bad}");
        }
    }

    #[test]
    fn reasons() {
        assert!(check_reason("a stuck migration in ci").is_ok());
        for bad in ["", "  ", "two\nlines", "\x1b[2J", &"x".repeat(257)] {
            assert!(check_reason(bad).is_err(), "{bad:?}");
        }
    }

    fn group(planned: &serde_json::Value) -> MysqlFailoverGroup {
        serde_json::from_value(json!({
            "apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlFailoverGroup",
            "metadata": {"name": "g"},
            "spec": {"sites": [], "initialActiveSite": "iad"},
            "status": {"activeSite": "pdx", "topologyGeneration": 5, "plannedFailover": planned}
        }))
        .unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn wait_follows_the_named_the_running_or_the_requested_operation() {
        let g: MysqlFailoverGroup = serde_json::from_value(json!({
            "apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlFailoverGroup",
            "metadata": {"name": "g"},
            "spec": {"sites": [], "initialActiveSite": "iad",
                     "plannedFailover": {"targetSite": "pdx", "requestId": "s-2"}},
            "status": {"activeSite": "iad", "topologyGeneration": 5,
                       "plannedFailover": {"requestId": "s-1", "targetSite": "pdx", "phase": "Completed"},
                       "orderedUpdate": {"requestId": "u-1", "phase": "UpdatingStandby"}}
        }))
        .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(pick(&g, None), Some((Kind::OrderedUpdate, "u-1".into())), "the one in flight first");
        assert_eq!(pick(&g, Some("s-1")), Some((Kind::Switchover, "s-1".into())));
        assert_eq!(pick(&g, Some("s-2")), Some((Kind::Switchover, "s-2".into())), "requested, not yet taken up");
        assert_eq!(pick(&g, Some("nope")), None);
        let mut idle = g.clone();
        if let Some(s) = idle.status.as_mut() {
            s.ordered_update = None;
        }
        assert_eq!(
            pick(&idle, None),
            Some((Kind::Switchover, "s-2".into())),
            "a request the operator has not taken up"
        );
        idle.spec.planned_failover = None;
        assert_eq!(pick(&idle, None), None);
    }

    #[test]
    fn every_phase_entered_is_told_and_the_outcome_is_final() {
        let g = group(&json!({"requestId": "r", "targetSite": "pdx", "phase": "Completed", "history": [
            {"phase": "Admitting", "time": "2026-01-01T00:00:00Z"},
            {"phase": "Deferred", "time": "2026-01-01T00:00:01Z", "message": "held by op-1"},
            {"phase": "Draining", "time": "2026-01-01T00:00:09Z"},
            {"phase": "Completed", "time": "2026-01-01T00:00:12Z"}]}));
        let (lines, outcome) = progress(&g, Kind::Switchover, "r");
        let shown: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(shown, ["Admitting", "Deferred: held by op-1", "Draining", "Completed"]);
        assert_eq!(
            outcome,
            Some(Outcome::Completed(
                "switchover r Completed: pdx is the active site of group g at topology generation 5".into()
            ))
        );
        assert_eq!(progress(&g, Kind::Switchover, "other"), (Vec::new(), None), "another request's status is not ours");
        let deferred = |retry: &str| {
            let g = group(&json!({"requestId": "r", "targetSite": "pdx", "phase": "Deferred", "admission": {
                "deferReason": "DeploymentHold", "message": "held by op-1 (instance app)", "retryTime": retry}}));
            progress(&g, Kind::Switchover, "r").0
        };
        let (first, renewed) = (deferred("2026-01-01T00:00:30Z"), deferred("2026-01-01T00:00:40Z"));
        assert_eq!(
            first[0].1,
            "Deferred by DeploymentHold: held by op-1 (instance app), admission tried again at 2026-01-01T00:00:30Z"
        );
        assert_eq!(first[0].0, renewed[0].0, "a renewal of the same hold is not news");
        let failed =
            group(&json!({"requestId": "r", "targetSite": "pdx", "phase": "Failed", "message": "catch-up timed out"}));
        assert_eq!(
            progress(&failed, Kind::Switchover, "r").1,
            Some(Outcome::Failed("switchover r Failed: catch-up timed out".into()))
        );
    }
}
