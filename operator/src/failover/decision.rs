//! Resolving and writing a group's decided roles, from the decision record
//! (`record.rs`, the operator's memory) and `status` (what users read).
//!
//! | record | status | outcome |
//! |---|---|---|
//! | matches status | | decided |
//! | present | differs or missing | status restored from the record, Warning `StatusRestored` |
//! | absent | both fields, site in spec, generation ≥ 1 | record created from status (adopted) |
//! | absent | neither field | undecided: bootstrap may run |
//! | absent | half, or a site not in spec | invalid: a person must act |
//!
//! Every decision writes the record first (compare-and-swap), then status
//! (merge patch with the resourceVersion read), so status is never ahead of
//! the record and a crash in between is completed by the next restore.

use bloodraven_api::names::DECIDER_FIELD_MANAGER;
use bloodraven_api::v1alpha1::{EmergencyFailoverStatus, MysqlFailoverGroup};
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::record;
use super::round::RoundRecord;
use crate::controller::{Context, Error, kube_err};

/// The group's decided roles, as resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// Never decided (a record of an older group of the same name may
    /// exist: bootstrap overwrites it).
    Undecided,
    /// Decided at `site` with `generation`.
    At {
        /// Active site.
        site: String,
        /// Topology generation.
        generation: i64,
        /// Set when status had to be restored: what it showed.
        restored_from: Option<String>,
    },
    /// Only a person can resolve this; the text says how.
    Invalid(String),
    /// The decision record was edited by hand, or was left by an older
    /// operator and disagrees with status: no decision explains it. Nothing
    /// is restored and nothing fails over until a person resolves it.
    Conflict(String),
}

fn describe(site: Option<&str>, generation: Option<i64>) -> String {
    format!(
        "activeSite={}, topologyGeneration={}",
        site.unwrap_or("<unset>"),
        generation.map_or_else(|| "<unset>".to_owned(), |g| g.to_string())
    )
}

/// The operations a group's status shows in flight (a non-final phase):
/// `(operation, requestId, phase)`, each operation named as in metrics
/// (`planned-failover`, `ordered-update`, `restore-in-place`). One runs at a
/// time, but a request is written `Pending` before its admission refuses
/// it, so status may show two; a phase this operator does not know is not
/// one it runs.
pub(crate) fn operations_in_flight(group: &MysqlFailoverGroup) -> Vec<(&'static str, String, String)> {
    use bloodraven_api::names::site_job::{OPERATION_ORDERED_UPDATE, OPERATION_RESTORE_IN_PLACE};
    use bloodraven_api::v1alpha1::{OrderedUpdatePhase, PlannedFailoverPhase, RestorePhase};
    let Some(status) = group.status.as_ref() else { return Vec::new() };
    let running = |phase: &str, final_: Option<bool>| final_.is_some_and(|f| !f).then(|| phase.to_owned());
    let planned = status.planned_failover.as_ref().and_then(|p| {
        running(&p.phase, PlannedFailoverPhase::parse(&p.phase).map(PlannedFailoverPhase::is_final))
            .map(|ph| (PLANNED_FAILOVER, p.request_id.clone(), ph))
    });
    let update = status.ordered_update.as_deref().and_then(|p| {
        running(&p.phase, OrderedUpdatePhase::parse(&p.phase).map(OrderedUpdatePhase::is_final))
            .map(|ph| (OPERATION_ORDERED_UPDATE, p.request_id.clone(), ph))
    });
    let restore = status.restore_in_place.as_deref().and_then(|p| {
        running(&p.phase, RestorePhase::parse(&p.phase).map(RestorePhase::is_final))
            .map(|ph| (OPERATION_RESTORE_IN_PLACE, p.request_id.clone(), ph))
    });
    [planned, update, restore].into_iter().flatten().collect()
}

/// The first operation a group's status shows in flight, if any.
pub(crate) fn operation_in_flight(group: &MysqlFailoverGroup) -> Option<(&'static str, String, String)> {
    operations_in_flight(group).into_iter().next()
}

/// The name of a planned failover among the operations.
pub(crate) const PLANNED_FAILOVER: &str = "planned-failover";

/// Another operation than `mine` in flight, in words ("planned failover r1
/// (phase Draining)"), for the admission that waits for it. One that has
/// not acted yet (`Pending`, `Admitting`, `Deferred`) and arrived after
/// `mine` (its first history entry; the operation's name breaks a tie) does
/// not count: two requests deferred behind one failover-hold are admitted
/// in the order they came, whichever engine runs first when the hold ends.
pub(crate) fn other_operation(group: &MysqlFailoverGroup, mine: &str) -> Option<String> {
    let mine_came = arrival(group, mine).map(|t| (t, mine));
    let (operation, id, phase) = operations_in_flight(group).into_iter().find(|(op, _, phase)| {
        let waiting = matches!(phase.as_str(), "Pending" | "Admitting" | "Deferred");
        let came_later = match (arrival(group, op).map(|t| (t, *op)), mine_came) {
            (Some(theirs), Some(ours)) => theirs > ours,
            _ => false,
        };
        *op != mine && !(waiting && came_later)
    })?;
    Some(format!("{} {id} (phase {phase})", operation.replace('-', " ")))
}

/// When the request of `operation` status shows arrived: its first history
/// entry.
fn arrival(group: &MysqlFailoverGroup, operation: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    use bloodraven_api::names::site_job::{OPERATION_ORDERED_UPDATE, OPERATION_RESTORE_IN_PLACE};
    let status = group.status.as_ref()?;
    let history = match operation {
        PLANNED_FAILOVER => &status.planned_failover.as_ref()?.history,
        OPERATION_ORDERED_UPDATE => &status.ordered_update.as_deref()?.history,
        OPERATION_RESTORE_IN_PLACE => &status.restore_in_place.as_deref()?.history,
        _ => return None,
    };
    history.first().map(|h| h.time.0)
}

/// Whether the group's status shows an operation that has not ended.
pub(crate) fn operation_running(group: &MysqlFailoverGroup) -> bool {
    operation_in_flight(group).is_some()
}

/// Whether the group's status shows an operation that has touched the
/// sites' roles and not ended: a switchover draining (the old primary
/// fenced) or decided and not yet done. Deleting such a group at once
/// would leave no writable site; its deletion waits for the end.
pub(crate) fn operation_touching_sites(group: &MysqlFailoverGroup) -> bool {
    use bloodraven_core::failover::{ordered_update, planned};
    let Some(status) = group.status.as_ref() else { return false };
    let planned = status.planned_failover.as_ref().and_then(|p| planned::Phase::parse(&p.phase)).is_some_and(|ph| {
        matches!(ph, planned::Phase::Draining | planned::Phase::Promoting | planned::Phase::Repointing)
    });
    let update = status
        .ordered_update
        .as_deref()
        .and_then(|p| ordered_update::Phase::parse(&p.phase))
        .is_some_and(|ph| ordered_update::switchover_phase(ph).is_some());
    let restore = status
        .restore_in_place
        .as_deref()
        .and_then(|p| bloodraven_core::failover::restore::Phase::parse(&p.phase))
        .is_some_and(|ph| {
            use bloodraven_core::failover::restore::Phase;
            matches!(ph, Phase::Fencing | Phase::Promoting | Phase::Repointing)
        });
    planned || update || restore
}

/// Resolves the decided roles, restoring status from the record or adopting
/// a valid status into a missing record.
pub(crate) async fn resolve(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &MysqlFailoverGroup,
) -> Result<Resolution, Error> {
    let name = group.name_any();
    let uid = group.meta().uid.clone().unwrap_or_default();
    let status = group.status.clone().unwrap_or_default();
    let (site, generation) = (status.active_site.as_deref(), status.topology_generation);
    let in_spec = |s: &str| group.spec.sites.iter().any(|x| x.name == s);
    match round.get().cloned() {
        Some(r) if r.group_uid == uid && r.tampered.is_some() => Ok(Resolution::Conflict(format!(
            "the decision record {} was edited by hand ({}); bloodraven will not fail this group over until a person resolves it: see docs/runbook.md, DecisionConflict",
            record::record_name(&name),
            r.tampered.unwrap_or_default()
        ))),
        Some(r) if r.group_uid == uid && r.generation < 1 => Ok(Resolution::Conflict(format!(
            "the decision record {} shows topologyGeneration {}, which no decision writes: see docs/runbook.md, DecisionConflict",
            record::record_name(&name),
            r.generation
        ))),
        Some(r) if r.group_uid == uid && ctx.groups.records.high_water(&uid).is_some_and(|hw| r.generation < hw) => {
            Ok(Resolution::Conflict(format!(
                "the decision record {} shows topologyGeneration {}, but this operator has seen generation {} decided: an older record was put back (replayed, or restored from a backup); bloodraven will not move the generation backwards: see docs/runbook.md, DecisionConflict",
                record::record_name(&name),
                r.generation,
                ctx.groups.records.high_water(&uid).unwrap_or_default()
            )))
        }
        Some(r) if r.group_uid == uid => {
            if !in_spec(&r.active_site) {
                return Ok(Resolution::Invalid(format!(
                    "the decision record names active site {}, which spec.sites no longer has; site names must not change after bootstrap: restore the site's name",
                    r.active_site
                )));
            }
            if site == Some(r.active_site.as_str()) && generation == Some(r.generation) {
                ctx.groups.records.note_decided(&uid, r.generation);
                return Ok(Resolution::At { site: r.active_site, generation: r.generation, restored_from: None });
            }
            write_status(ctx, group, &r.active_site, r.generation, None).await?;
            Ok(Resolution::At {
                site: r.active_site,
                generation: r.generation,
                restored_from: Some(describe(site, generation)),
            })
        }
        _ => match (site, generation) {
            (None, None) => Ok(Resolution::Undecided),
            (Some(s), Some(g)) if in_spec(s) && g >= 1 => {
                round.write(ctx, s, g, &record::Extra::default()).await?;
                tracing::info!(group = %name, site = s, generation = g, "decision record created from status");
                Ok(Resolution::At { site: s.to_owned(), generation: g, restored_from: None })
            }
            (Some(s), Some(_)) if !in_spec(s) => Ok(Resolution::Invalid(format!(
                "status.activeSite {s} is not one of spec.sites and no decision record exists; set status.activeSite and status.topologyGeneration to the last decided values"
            ))),
            _ => Ok(Resolution::Invalid(format!(
                "status shows {} and no decision record exists; bloodraven will not re-bootstrap a group with a history: set both fields to the last decided values",
                describe(site, generation)
            ))),
        },
    }
}

/// Bootstrap: records and then publishes `activeSite = site`, generation 1,
/// and says so in a `Bootstrapped` Event.
pub(crate) async fn bootstrap(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &MysqlFailoverGroup,
    site: &str,
) -> Result<(), Error> {
    if !ctx.leadership.is_leader() {
        return Ok(());
    }
    round.write(ctx, site, 1, &record::Extra::default()).await?;
    write_status(ctx, group, site, 1, None).await?;
    tracing::info!(group = %group.name_any(), site = %site, generation = 1, "bootstrap complete");
    crate::controller::failover_group::publish(
        ctx,
        group,
        kube::runtime::events::EventType::Normal,
        bloodraven_api::v1alpha1::reason::BOOTSTRAPPED,
        format!("site {site} is the writable primary and the other site replicates from it; topologyGeneration is 1"),
        "Bootstrap",
        None,
    )
    .await;
    Ok(())
}

/// A failover's decision (planned or emergency): records `site` at the
/// round's record's generation + 1 (the round's copy is the
/// compare-and-swap base), then writes status. Returns the group as
/// written. The record is first, so a crash in between is completed by the
/// next restore, never decided twice.
pub(crate) async fn decide(
    ctx: &Context,
    round: &mut RoundRecord,
    group: &MysqlFailoverGroup,
    site: &str,
    extra: &record::Extra,
    emergency: Option<&EmergencyFailoverStatus>,
) -> Result<MysqlFailoverGroup, Error> {
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    let Some(previous) = round.get() else {
        return Err(Error::Site {
            action: "decide for",
            site: site.to_owned(),
            message: "the decision record is gone".into(),
        });
    };
    let generation = previous.generation + 1;
    round.write(ctx, site, generation, extra).await?;
    ctx.failpoint.hit("decide-after-record");
    write_status(ctx, group, site, generation, emergency).await
}

/// The status half of a decision: one merge patch carrying the
/// resourceVersion the reconcile read (a 409 if anyone wrote in between).
async fn write_status(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    site: &str,
    generation: i64,
    emergency: Option<&EmergencyFailoverStatus>,
) -> Result<MysqlFailoverGroup, Error> {
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    let mut patch = json!({
        "metadata": { "resourceVersion": group.resource_version() },
        "status": { "activeSite": site, "topologyGeneration": generation },
    });
    if let Some(emergency) = emergency {
        // With the decision, in one write: what the promotion abandoned.
        patch["status"]["emergencyFailover"] = json!(emergency);
        // A finished planned failover stays the last request shown (`kubectl
        // get`), so its message says that it is no longer the latest change.
        if let Some(planned) = group.status.as_ref().and_then(|s| s.planned_failover.as_ref())
            && matches!(planned.phase.as_str(), "Completed" | "Failed")
        {
            let earlier = planned.message.as_deref().unwrap_or_default();
            let earlier = earlier.split("; since then").next().unwrap_or_default();
            patch["status"]["plannedFailover"] = json!({
                "message": format!(
                    "{earlier}; since then an emergency failover from {} made {} the active site at topologyGeneration {generation}",
                    emergency.from_site, emergency.to_site
                )
            });
        }
    }
    let params = PatchParams { field_manager: Some(DECIDER_FIELD_MANAGER.into()), ..PatchParams::default() };
    api.patch_status(&group.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map_err(kube_err("write the topology decision"))
}

#[cfg(test)]
mod operations_tests {
    use super::*;
    use bloodraven_api::names::site_job::{OPERATION_ORDERED_UPDATE, OPERATION_RESTORE_IN_PLACE};

    fn group(status: &serde_json::Value) -> MysqlFailoverGroup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlFailoverGroup",
            "metadata": {"name": "orders"},
            "spec": {"initialActiveSite": "iad", "sites": [
                {"name": "iad", "host": "h1", "port": 3306, "credentialsSecretRef": {"namespace": "n", "name": "s"}},
                {"name": "pdx", "host": "h2", "port": 3306, "credentialsSecretRef": {"namespace": "n", "name": "s"}},
            ]},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn each_operation_in_admission_sees_every_other_in_flight_whatever_their_order() {
        let ops = [
            (
                "plannedFailover",
                PLANNED_FAILOVER,
                serde_json::json!({"requestId": "p1", "targetSite": "pdx", "phase": "Draining"}),
            ),
            (
                "orderedUpdate",
                OPERATION_ORDERED_UPDATE,
                serde_json::json!({"requestId": "u1", "phase": "UpdatingFormerPrimary"}),
            ),
            (
                "restoreInPlace",
                OPERATION_RESTORE_IN_PLACE,
                serde_json::json!({"requestId": "r1", "phase": "AwaitingReclone"}),
            ),
        ];
        for (mine_field, mine, _) in &ops {
            for (other_field, other, running) in &ops {
                if mine == other {
                    continue;
                }
                let mut status = serde_json::json!({});
                status[*mine_field] = serde_json::json!({"requestId": "x", "targetSite": "pdx", "phase": "Admitting"});
                status[*other_field] = running.clone();
                let seen = other_operation(&group(&status), mine);
                assert!(
                    seen.as_deref().is_some_and(|s| s.starts_with(&other.replace('-', " "))),
                    "{mine} in admission must see {other} in flight: {seen:?}"
                );
            }
            let mut alone = serde_json::json!({});
            alone[*mine_field] = serde_json::json!({"requestId": "x", "targetSite": "pdx", "phase": "Admitting"});
            assert_eq!(other_operation(&group(&alone), mine), None, "{mine} alone");
        }
    }

    #[test]
    fn two_requests_deferred_behind_one_hold_are_admitted_in_the_order_they_came() {
        let at = |phase: &str, secs: u32| serde_json::json!({"phase": phase, "time": format!("2026-12-01T00:00:{secs:02}Z")});
        let request = |id: &str, phase: &str, came: u32| {
            serde_json::json!({"requestId": id, "targetSite": "pdx", "phase": phase,
                "history": [at("Pending", came), at(phase, 50)]})
        };
        // The update came first: it is admitted; the restore waits for it.
        let status = serde_json::json!({
            "orderedUpdate": request("u1", "Admitting", 10),
            "restoreInPlace": request("r1", "Admitting", 20),
        });
        assert_eq!(other_operation(&group(&status), OPERATION_ORDERED_UPDATE), None);
        let seen = other_operation(&group(&status), OPERATION_RESTORE_IN_PLACE).unwrap();
        assert!(seen.starts_with("ordered update u1"), "{seen}");
        // Whatever the later one's phase before it acts.
        for later in ["Pending", "Deferred", "Admitting"] {
            let status = serde_json::json!({
                "plannedFailover": request("p1", "Deferred", 5),
                "restoreInPlace": request("r1", later, 20),
            });
            assert_eq!(other_operation(&group(&status), PLANNED_FAILOVER), None, "{later}");
            assert!(other_operation(&group(&status), OPERATION_RESTORE_IN_PLACE).is_some());
        }
        // One that has acted counts, however late it came; so does one
        // whose arrival status does not show.
        let status = serde_json::json!({
            "orderedUpdate": request("u1", "Admitting", 10),
            "restoreInPlace": request("r1", "Restoring", 20),
        });
        assert!(other_operation(&group(&status), OPERATION_ORDERED_UPDATE).is_some());
        let status = serde_json::json!({
            "orderedUpdate": request("u1", "Admitting", 10),
            "restoreInPlace": {"requestId": "r1", "phase": "Admitting"},
        });
        assert!(other_operation(&group(&status), OPERATION_ORDERED_UPDATE).is_some());
        // Same second: the operation's name decides, and exactly one goes.
        let status = serde_json::json!({
            "orderedUpdate": request("u1", "Admitting", 10),
            "restoreInPlace": request("r1", "Admitting", 10),
        });
        let goes = [OPERATION_ORDERED_UPDATE, OPERATION_RESTORE_IN_PLACE]
            .iter()
            .filter(|op| other_operation(&group(&status), op).is_none())
            .count();
        assert_eq!(goes, 1);
    }
}
