//! `explain GROUP`: the questions on-call asks, answered in words from the
//! group's status, its deploy leases and the MysqlDatabases that name it.

use bloodraven_api::v1alpha1::{MysqlDatabase, MysqlFailoverGroup};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt as _};

use crate::kube_ctx::{Ctx, access};
use crate::leases::{self, Leases};
use crate::output::{Paint, cell, short_duration};
use crate::status::{condition, operation_line, operations};

/// The answers, one paragraph per question.
pub(crate) fn answers(
    g: &MysqlFailoverGroup,
    leases: &Result<Leases, String>,
    databases: &Result<Vec<MysqlDatabase>, String>,
    paint: Paint,
    now: Timestamp,
) -> String {
    let mut out: Vec<String> = Vec::new();
    deferred(&mut out, g, leases, paint, now);
    held(&mut out, g, paint);
    authority(&mut out, g, databases, paint);
    bypass(&mut out, g, paint, now);
    out.concat()
}

fn q(out: &mut Vec<String>, paint: Paint, question: &str) {
    out.push(format!("{}\n", paint.bold(question)));
}

fn a(out: &mut Vec<String>, answer: &str) {
    out.push(format!("  {answer}\n"));
}

fn deferred(
    out: &mut Vec<String>,
    g: &MysqlFailoverGroup,
    leases: &Result<Leases, String>,
    paint: Paint,
    now: Timestamp,
) {
    let name = g.name_any();
    q(out, paint, "Why is the switchover deferred?");
    let ops = operations(g);
    let deferred = ops.iter().find(|o| o.in_flight && o.phase == "Deferred");
    match deferred {
        None => match ops.iter().find(|o| o.in_flight) {
            Some(o) => a(out, &format!("It is not deferred: {}.", operation_line(o, now))),
            None => a(out, "No switchover, ordered update or restore-in-place is in flight."),
        },
        Some(o) => {
            let adm = o.admission.clone().unwrap_or_default();
            a(
                out,
                &format!(
                    "{} waits for admission: {} — {}.",
                    operation_line(o, now),
                    cell(adm.defer_reason.as_deref().unwrap_or("?")),
                    cell(adm.message.as_deref().unwrap_or("no message"))
                ),
            );
            if let Some(t) = &adm.retry_time {
                a(
                    out,
                    &format!(
                        "Admission is tried again at {} (when the hold expires, or as soon as it is released).",
                        t.0
                    ),
                );
            }
            if let Ok(l) = leases {
                for h in l.live().filter(|g| g.kind == "failover-hold") {
                    a(
                        out,
                        &format!(
                            "The failover-hold is held by operation {} (instance {}, client {}), expiring {}.",
                            cell(&h.operation_id),
                            cell(&h.instance),
                            cell(h.client.as_deref().unwrap_or("-")),
                            leases::time_left(h, now)
                        ),
                    );
                }
            }
            a(
                out,
                &format!(
                    "It goes on by itself when the migration ends. To end the hold now (the migration is fenced): kubectl bloodraven revoke {name} --reason TEXT"
                ),
            );
        }
    }
}

fn held(out: &mut Vec<String>, g: &MysqlFailoverGroup, paint: Paint) {
    let name = g.name_any();
    q(out, paint, "\nWhy is automatic failover held?");
    let mut held = false;
    if !g.spec.failover.automatic {
        held = true;
        a(
            out,
            &format!(
                "It is off: spec.failover.automatic is false (kubectl patch mfg {name} --type merge -p '{{\"spec\":{{\"failover\":{{\"automatic\":true}}}}}}')."
            ),
        );
    }
    for type_ in ["AutomaticFailoverHeld", "DecisionConflict", "SiteDiverged", "RecloneRequired", "SplitBrain"] {
        if let Some(c) = condition(g, type_).filter(|c| c.status == "True") {
            held = true;
            a(out, &format!("{} ({}): {}", paint.bad(type_), cell(&c.reason), cell(&c.message)));
        }
    }
    if !held {
        a(out, "It is not held: the operator fails over on its own when the primary stops answering.");
    }
    a(out, "A deploy failover-hold never holds it: a hold defers planned operations only.");
}

fn authority(
    out: &mut Vec<String>,
    g: &MysqlFailoverGroup,
    databases: &Result<Vec<MysqlDatabase>, String>,
    paint: Paint,
) {
    q(out, paint, "\nWhy is a MysqlDatabase not authoritative?");
    match databases {
        Err(e) => a(out, &paint.warn(&cell(e))),
        Ok(dbs) if dbs.is_empty() => a(out, "No MysqlDatabase that you may read names this group."),
        Ok(dbs) => {
            for db in dbs {
                let who = format!("{}/{}", cell(&db.namespace().unwrap_or_default()), cell(&db.name_any()));
                let ready = db.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
                match ready {
                    Some(c) if c.status == "True" => a(out, &format!("{who}: authoritative ({}).", cell(&c.reason))),
                    Some(c) => a(
                        out,
                        &format!(
                            "{who}: {} — {}: {}",
                            paint.bad("not authoritative"),
                            cell(&c.reason),
                            cell(&c.message)
                        ),
                    ),
                    None => a(out, &format!("{who}: not judged yet (no Ready condition: is the operator running?)")),
                }
            }
        }
    }
    if let Some(s) = &g.status {
        for claim in &s.instance_claims {
            a(
                out,
                &format!("Instance name {} is claimed by namespace {}.", cell(&claim.instance), cell(&claim.namespace)),
            );
        }
    }
}

fn bypass(out: &mut Vec<String>, g: &MysqlFailoverGroup, paint: Paint, now: Timestamp) {
    q(out, paint, "\nWhich accounts bypass read-only?");
    match condition(g, "ReadOnlyBypassAccounts") {
        Some(c) if c.status == "True" => a(out, &format!("{}: {}", paint.warn(&cell(&c.reason)), cell(&c.message))),
        Some(c) => a(out, &format!("None besides the operator's: {}", cell(&c.message))),
        None => a(out, "Not reported yet (the operator reports it once it has read each site's grants)."),
    }

    if let Some(reason) = g.status.as_ref().and_then(|s| s.unstable_reason.as_deref()) {
        q(out, paint, "\nWhy is the group not stable?");
        let words =
            condition(g, reason).map_or_else(|| "see `kubectl bloodraven status`".to_owned(), |c| cell(&c.message));
        let since = condition(g, reason).map_or(String::new(), |c| {
            format!(" (for {})", short_duration(now.duration_since(c.last_transition_time.0).as_secs()))
        });
        a(out, &format!("{}{since}: {words}", cell(reason)));
        a(out, "While it is not stable the deploy API answers 423 and no migration lease is granted or renewed.");
    }
}

/// `explain GROUP`.
pub(crate) async fn run(ctx: &Ctx, group: &str) -> anyhow::Result<u8> {
    let g = ctx.group(group).await?;
    let leases = leases::read(ctx, &g).await.map_err(|e| format!("{e:#}"));
    let databases = databases(ctx, group).await;
    print!("{}", answers(&g, &leases, &databases, Paint::stdout(), Timestamp::now()));
    Ok(0)
}

/// The MysqlDatabases naming `group`: in every namespace when the user may
/// list them cluster-wide, else in `-n`'s.
async fn databases(ctx: &Ctx, group: &str) -> Result<Vec<MysqlDatabase>, String> {
    let all: Api<MysqlDatabase> = Api::all(ctx.client.clone());
    let items = match all.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 403 => {
            let here: Api<MysqlDatabase> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
            here.list(&ListParams::default())
                .await
                .map_err(|e| {
                    format!("{:#}", access(e, "list", "mysqldatabases.bloodraven.shipstream.io", Some(&ctx.namespace)))
                })?
                .items
        }
        Err(e) => return Err(format!("{:#}", access(e, "list", "mysqldatabases.bloodraven.shipstream.io", None))),
    };
    Ok(items.into_iter().filter(|d| d.spec.failover_group_ref.name == group).collect())
}
