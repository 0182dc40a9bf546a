//! The bookkeeping every request that runs a user's Job shares (an
//! ordered update, a restore-in-place): each phase written to its status
//! field with its history, Event and metric, and the deferral behind a
//! failover-hold. What differs between them is their [`RequestStatus`].

use std::time::Duration;

use bloodraven_api::names::ENGINE_FIELD_MANAGER;
use bloodraven_api::v1alpha1::{
    IgnoredRequest, MysqlFailoverGroup, OrderedUpdateStatus, PhaseTransition, PlannedFailoverAdmission,
    RestoreInPlaceStatus, reason,
};
use bloodraven_core::lease::machine::Grant;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::controller::failover_group::{mark_operation_in_progress, publish};
use crate::controller::{Context, Error, kube_err};
use crate::failover::planned::request::replacing;

/// Entries kept in a request's history.
const MAX_HISTORY: usize = 32;

/// A request's status field, as its engine keeps it.
pub(crate) trait RequestStatus: serde::Serialize + Clone + PartialEq {
    /// The operation's name in metrics, Job labels and the record.
    const OPERATION: &'static str;
    /// Its Events' reason prefix (`OrderedUpdate` + the phase).
    const EVENT_PREFIX: &'static str;
    /// Its name in words.
    const WORDS: &'static str;
    /// Its field in status.
    const FIELD: &'static str;
    /// Its field in spec.
    const SPEC_FIELD: &'static str;
    /// Its status field for a request not taken up (`RequestIdReused`).
    const IGNORED_FIELD: &'static str;
    /// That report, as stored in `group`'s status.
    fn ignored(group: &MysqlFailoverGroup) -> Option<&IgnoredRequest>;
    /// The stored copy in `group`'s status.
    fn stored(group: &MysqlFailoverGroup) -> Option<&Self>;
    /// The request's id.
    fn request_id(&self) -> &str;
    /// The phase, message, admission and history, to change.
    fn parts(&mut self) -> Parts<'_>;
}

/// What [`enter`] changes of a request's status.
pub(crate) struct Parts<'a> {
    pub(crate) phase: &'a mut String,
    pub(crate) message: &'a mut Option<String>,
    pub(crate) admission: &'a mut Option<PlannedFailoverAdmission>,
    pub(crate) attention_site: &'a mut Option<String>,
    pub(crate) history: &'a mut Vec<PhaseTransition>,
}

impl RequestStatus for OrderedUpdateStatus {
    const OPERATION: &'static str = bloodraven_api::names::site_job::OPERATION_ORDERED_UPDATE;
    const EVENT_PREFIX: &'static str = "OrderedUpdate";
    const WORDS: &'static str = "ordered update";
    const FIELD: &'static str = "orderedUpdate";
    const SPEC_FIELD: &'static str = "orderedUpdate";
    const IGNORED_FIELD: &'static str = "ignoredOrderedUpdate";
    fn ignored(group: &MysqlFailoverGroup) -> Option<&IgnoredRequest> {
        group.status.as_ref().and_then(|s| s.ignored_ordered_update.as_ref())
    }
    fn stored(group: &MysqlFailoverGroup) -> Option<&Self> {
        group.status.as_ref().and_then(|s| s.ordered_update.as_deref())
    }
    fn request_id(&self) -> &str {
        &self.request_id
    }
    fn parts(&mut self) -> Parts<'_> {
        Parts {
            phase: &mut self.phase,
            message: &mut self.message,
            admission: &mut self.admission,
            attention_site: &mut self.attention_site,
            history: &mut self.history,
        }
    }
}

impl RequestStatus for RestoreInPlaceStatus {
    const OPERATION: &'static str = bloodraven_api::names::site_job::OPERATION_RESTORE_IN_PLACE;
    const EVENT_PREFIX: &'static str = "RestoreInPlace";
    const WORDS: &'static str = "restore-in-place";
    const FIELD: &'static str = "restoreInPlace";
    const SPEC_FIELD: &'static str = "restoreInPlace";
    const IGNORED_FIELD: &'static str = "ignoredRestoreInPlace";
    fn ignored(group: &MysqlFailoverGroup) -> Option<&IgnoredRequest> {
        group.status.as_ref().and_then(|s| s.ignored_restore_in_place.as_ref())
    }
    fn stored(group: &MysqlFailoverGroup) -> Option<&Self> {
        group.status.as_ref().and_then(|s| s.restore_in_place.as_deref())
    }
    fn request_id(&self) -> &str {
        &self.request_id
    }
    fn parts(&mut self) -> Parts<'_> {
        Parts {
            phase: &mut self.phase,
            message: &mut self.message,
            admission: &mut self.admission,
            attention_site: &mut self.attention_site,
            history: &mut self.history,
        }
    }
}

/// The word of a request in the decision record's `requests`: the
/// operations share the list with the planned failover's ids, and `/` is
/// in no request id, so they never collide.
pub(crate) fn recorded_id<S: RequestStatus>(request_id: &str) -> String {
    format!("{}/{request_id}", S::OPERATION)
}

/// The record's `inFlight` for a request (`record::Record::in_flight`):
/// `terms`, its recorded id first, one word each. `None` when a term is
/// empty or not one word: the operator takes requests up with site names,
/// namespaces and numbers, so such a status was written by someone else.
pub(crate) fn in_flight_words(terms: &[&str]) -> Option<String> {
    terms.iter().all(|t| !t.is_empty() && !t.contains(char::is_whitespace)).then(|| terms.join(" "))
}

/// A request of an operation that runs a Job, as status shows it in a
/// non-final phase, for [`not_ours`].
pub(crate) struct Shown<'a> {
    pub(crate) request_id: &'a str,
    pub(crate) phase: &'a str,
    /// `Pending`, `Admitting` or `Deferred`: nothing done to a site yet.
    pub(crate) before_job: bool,
    /// In `Pending` (not taken up yet): the terms its spec asks for, from
    /// the source and generation status shows (empty when spec asks for
    /// nothing).
    pub(crate) pending: Option<String>,
    /// The request id the spec asks for now.
    pub(crate) asked: Option<&'a str>,
    /// Its terms (`in_flight_words`).
    pub(crate) in_flight: Option<String>,
    /// In a switchover phase: whether the record names it admitted.
    pub(crate) admitted: Option<bool>,
}

/// Why the operator will not act on the request of `S` that status shows,
/// if so: before its first Job it must be what spec asks (else it was
/// cancelled); once taken up, the decision record must hold it in flight
/// on the terms status shows ([`not_as_recorded`]), and in a switchover
/// name it as admitted (else status was written by someone else).
pub(crate) fn not_ours<S: RequestStatus>(
    rec: Option<&crate::failover::record::Record>,
    shown: &Shown<'_>,
) -> Option<String> {
    if shown.before_job && shown.asked != Some(shown.request_id) {
        return Some(format!("cancelled: spec.{} no longer asks for it", S::SPEC_FIELD));
    }
    let id = recorded_id::<S>(shown.request_id);
    let admitted = shown.admitted;
    let why = not_as_recorded(rec, &id, shown.in_flight.as_deref(), shown.pending.as_deref(), admitted == Some(true))
        .or_else(|| (admitted == Some(false)).then_some("the operator never admitted its switchover"))?;
    Some(format!(
        "status showed {} {} in phase {}, but {why} (status is written by the operator only); nothing was done",
        S::WORDS,
        shown.request_id,
        shown.phase
    ))
}

/// The operation of a request's recorded id or of a record line that
/// starts with one (`inFlight`, `admitted`): `None` for a planned
/// failover's, whose ids carry no `operation/`.
pub(crate) fn operation_of(recorded: &str) -> Option<&str> {
    recorded.split(' ').next()?.split_once('/').map(|(operation, _)| operation)
}

/// Why the record does not let the operator act on a request in a
/// non-final phase, `recorded_id` with the terms `in_flight` status shows:
/// a request the record lists runs only on the terms recorded when it was
/// taken up, and only until it ends; one it does not list can only be new:
/// still `Pending`, on the terms its spec asks for from the source status
/// shows (`pending`: `Some` of those, in `Pending`; status is not where a
/// request's other terms come from, and a source that is not the decided
/// one is superseded by the rules before anything runs). `admitted`: the
/// phase is a switchover's and the record names it admitted; with no
/// request of its operation in flight, that admission (cleared too when a
/// request ends) stands for it: an operator that kept no `inFlight`
/// admitted it before an upgrade. `None`: it may be acted on.
pub(crate) fn not_as_recorded(
    rec: Option<&crate::failover::record::Record>,
    recorded_id: &str,
    in_flight: Option<&str>,
    pending: Option<&str>,
    admitted: bool,
) -> Option<&'static str> {
    let held = |terms: &str| rec.is_some_and(|r| r.in_flight.iter().any(|t| t == terms));
    let listed = rec.is_some_and(|r| r.requests.iter().any(|r| r == recorded_id)) || in_flight.is_some_and(held);
    let operation = operation_of(recorded_id);
    let kept = rec.is_some_and(|r| r.in_flight.iter().any(|t| operation_of(t) == operation));
    match in_flight {
        _ if listed && admitted && !kept => None,
        None => Some("its terms are not words the operator writes"),
        Some(terms) if !listed => match pending {
            None => Some("the decision record never took it up"),
            Some(asked) if asked != terms => Some(
                "its terms are not those its spec asks for (written into status by someone else, or the spec edited under the same id before it was taken up)",
            ),
            Some(_) => None,
        },
        Some(terms) if !held(terms) => {
            Some("the decision record took it up on other terms, or it has ended (a request runs once)")
        }
        Some(_) => None,
    }
}

/// The running phase to write back when status shows a request in a final
/// phase the operator never wrote. The operator enters every phase with a
/// history entry, so a final phase (or one that does not parse) over a
/// history that ends in a running phase was written by someone else; and
/// while the decision record still holds the request in flight on the
/// terms status shows, the request has not ended. Taken for its end, a
/// request that had fenced the old primary would leave that site
/// read-only, and one past its decision the decided site unpromoted, with
/// nobody to finish either: the request runs on from that phase instead,
/// to an end of its own. `None`: it ended, or status says too little to
/// tell (the history edited too), and a person follows the runbook.
pub(crate) fn ended_by_hand<'a>(
    rec: Option<&crate::failover::record::Record>,
    in_flight: Option<&str>,
    phase: &str,
    history: &'a [PhaseTransition],
    is_final: impl Fn(&str) -> bool,
) -> Option<&'a str> {
    let last = history.last().filter(|last| is_final(phase) && !is_final(&last.phase))?;
    let terms = in_flight?;
    let held = rec.filter(|r| r.tampered.is_none()).is_some_and(|r| r.in_flight.iter().any(|t| t == terms));
    held.then_some(last.phase.as_str())
}

/// Whether status may show a request [`ended_by_hand`], from status alone
/// (no record read): a final phase over a history that ends in a running one.
pub(crate) fn may_be_ended_by_hand(phase: &str, history: &[PhaseTransition], is_final: impl Fn(&str) -> bool) -> bool {
    is_final(phase) && history.last().is_some_and(|last| !is_final(&last.phase))
}

/// The note of a request [`ended_by_hand`] and run on.
pub(crate) fn run_on_note(words: &str, request_id: &str, shown: &str, last: &str) -> String {
    let shown = if shown.is_empty() { "(none)" } else { shown };
    format!(
        "status showed {words} {request_id} in phase {shown}, which the operator did not write (its history ends in {last}), while the decision record holds it in flight: it runs on from {last} to its own end. To stop a request, remove it from the spec (docs/runbook.md)"
    )
}

/// Runs on a request of `S` [`ended_by_hand`]: its running phase written
/// back, history untouched (its deadlines count from there), and a Warning
/// Event `StatusRestored`. Returns the group as written, or as it was.
pub(crate) async fn run_on_if_ended_by_hand<S: RequestStatus>(
    ctx: &Context,
    round: &mut crate::failover::round::RoundRecord,
    group: MysqlFailoverGroup,
    in_flight_of: fn(&S) -> Option<String>,
    is_final: fn(&str) -> bool,
) -> Result<MysqlFailoverGroup, Error> {
    let Some(mut state) = S::stored(&group).cloned() else { return Ok(group) };
    let (phase, history) = {
        let parts = state.parts();
        (parts.phase.clone(), parts.history.clone())
    };
    if !may_be_ended_by_hand(&phase, &history, is_final) || !ctx.leadership.is_leader() {
        return Ok(group);
    }
    let rec = round.fresh(ctx).await?.cloned();
    let terms = in_flight_of(&state);
    let Some(last) = ended_by_hand(rec.as_ref(), terms.as_deref(), &phase, &history, is_final).map(str::to_owned)
    else {
        return Ok(group);
    };
    let note = run_on_note(S::WORDS, state.request_id(), &phase, &last);
    tracing::warn!(group = %group.name_any(), request_id = %state.request_id(), shown = %phase, phase = %last, "request ended in status by someone else runs on");
    let parts = state.parts();
    last.clone_into(parts.phase);
    *parts.message = Some(note.clone());
    let written = write_state(ctx, &group, &state, true).await?;
    publish(ctx, &written, EventType::Warning, reason::STATUS_RESTORED, note, S::EVENT_PREFIX, None).await;
    Ok(written)
}

/// Reports a request in spec whose id was taken up before (`why`) as
/// ignored: the status field [`RequestStatus::IGNORED_FIELD`] and one
/// Warning Event `RequestIdReused`, once per id and site. A request runs
/// once, so the person who reused the id (or re-applied an old manifest)
/// learns to write a new one instead of waiting for an operation that never
/// comes; the next request taken up clears the report.
pub(crate) async fn ignore_reused<S: RequestStatus>(
    ctx: &Context,
    group: MysqlFailoverGroup,
    (request_id, site): (&str, &str),
    why: &str,
) -> Result<MysqlFailoverGroup, Error> {
    let ignored = IgnoredRequest {
        request_id: request_id.to_owned(),
        target_site: site.to_owned(),
        reason: reason::REQUEST_ID_REUSED.to_owned(),
        message: format!(
            "spec.{}.requestId {request_id} was not taken up: {why}, and a request runs once; to ask for another {}, write a new requestId",
            S::SPEC_FIELD,
            S::WORDS
        ),
    };
    if S::ignored(&group) == Some(&ignored) || !ctx.leadership.is_leader() {
        return Ok(group);
    }
    tracing::warn!(group = %group.name_any(), %request_id, operation = S::OPERATION, "request id reused; not taken up");
    report_ignored(ctx, &group, S::IGNORED_FIELD, ignored).await
}

/// Writes `ignored` to the status field `field` and publishes its Warning
/// Event (`RequestIdReused`): the report every kind of request shares.
pub(crate) async fn report_ignored(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    field: &str,
    ignored: IgnoredRequest,
) -> Result<MysqlFailoverGroup, Error> {
    let mut status = serde_json::Map::new();
    status.insert(field.to_owned(), serde_json::to_value(&ignored).unwrap_or_default());
    let patch = json!({ "status": status });
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    let params = PatchParams { field_manager: Some(ENGINE_FIELD_MANAGER.into()), ..PatchParams::default() };
    let written = api
        .patch_status(&group.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map_err(kube_err("report an ignored request for"))?;
    publish(ctx, &written, EventType::Warning, reason::REQUEST_ID_REUSED, ignored.message, "TakeUpRequest", None).await;
    Ok(written)
}

/// Enters `phase` (`running`: not final): history, status (one write),
/// Event and metric. `attention` names the site that needs a person.
pub(crate) async fn enter<S: RequestStatus>(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &mut S,
    (phase, running): (&'static str, bool),
    message: Option<String>,
    admission: Option<PlannedFailoverAdmission>,
    attention: Option<String>,
) -> Result<MysqlFailoverGroup, Error> {
    let parts = state.parts();
    phase.clone_into(parts.phase);
    parts.message.clone_from(&message);
    *parts.admission = admission;
    if attention.is_some() {
        *parts.attention_site = attention;
    }
    parts.history.push(PhaseTransition {
        phase: phase.to_owned(),
        time: Time(Timestamp::now()),
        message: message.clone(),
    });
    if parts.history.len() > MAX_HISTORY {
        // Keep the first entry (when it started) and the latest ones.
        let excess = parts.history.len() - MAX_HISTORY;
        parts.history.drain(1..=excess);
    }
    let times = parts.history.iter().filter(|h| h.phase == phase).count();
    let written = write_state(ctx, group, state, running).await?;
    ctx.failpoint.hit(&format!("{}-entered-{phase}", S::OPERATION));
    ctx.metrics.operation_phase_transitions_total.with_label_values(&[&group.name_any(), S::OPERATION, phase]).inc();
    let type_ = if phase == "Failed" { EventType::Warning } else { EventType::Normal };
    let again = if times > 1 { format!(" (again: time {times})") } else { String::new() };
    let note = format!(
        "{} {}: {phase}{again}{}",
        S::WORDS,
        state.request_id(),
        message.map(|m| format!(": {m}")).unwrap_or_default()
    );
    publish(ctx, &written, type_, &format!("{}{phase}", S::EVENT_PREFIX), note, S::EVENT_PREFIX, None).await;
    Ok(written)
}

/// Writes the request's status field with the resourceVersion of `group`,
/// and, while it runs, has the observer mark the group unstable
/// (`OperationInProgress`) right after.
pub(crate) async fn write_state<S: RequestStatus>(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &S,
    running: bool,
) -> Result<MysqlFailoverGroup, Error> {
    if !ctx.leadership.is_leader() {
        return Err(Error::NotLeader);
    }
    let mut status = serde_json::Map::new();
    status.insert(S::FIELD.to_owned(), replacing(S::stored(group), state));
    if S::ignored(group).is_some() {
        // A request was taken up: the report of an ignored one is over.
        status.insert(S::IGNORED_FIELD.to_owned(), serde_json::Value::Null);
    }
    let patch = json!({ "metadata": { "resourceVersion": group.resource_version() }, "status": status });
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    let params = PatchParams { field_manager: Some(ENGINE_FIELD_MANAGER.into()), ..PatchParams::default() };
    let written = api
        .patch_status(&group.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map_err(kube_err("write a request's progress"))?;
    if running {
        return mark_operation_in_progress(ctx, written).await;
    }
    Ok(written)
}

/// Writes the request's status if it changed since `group` was read.
pub(crate) async fn write_if_changed<S: RequestStatus>(
    ctx: &Context,
    group: &MysqlFailoverGroup,
    state: &S,
) -> Result<MysqlFailoverGroup, Error> {
    if S::stored(group) == Some(state) { Ok(group.clone()) } else { write_state(ctx, group, state, true).await }
}

/// The admission a live failover-hold gives a deferred request, and when
/// to look again (just after the hold's expiry, which every renewal moves).
pub(crate) fn deferral<S: RequestStatus>(hold: &Grant) -> (PlannedFailoverAdmission, Duration) {
    let expires = hold.expires_at();
    let admission = PlannedFailoverAdmission {
        defer_reason: Some(reason::DEPLOYMENT_HOLD.to_owned()),
        retry_time: Some(Time(expires)),
        message: Some(format!(
            "the failover-hold of operation {} (instance {}) defers this {} until it is released or lapses",
            hold.operation_id,
            hold.instance,
            S::WORDS
        )),
    };
    let wait = (expires.as_millisecond() - Timestamp::now().as_millisecond()).max(0);
    (admission, Duration::from_millis(u64::try_from(wait).unwrap_or(0)) + Duration::from_millis(200))
}

/// The conditions that make a group unstable for a reason of its own: a
/// request is admitted only while none is true.
const UNHEALTHY: [bloodraven_api::v1alpha1::ConditionType; 8] = {
    use bloodraven_api::v1alpha1::ConditionType as T;
    [
        T::Degraded,
        T::SplitBrain,
        T::NoPrimary,
        T::ReplicationNotRunning,
        T::RecoveryPending,
        T::SiteDiverged,
        T::DecisionConflict,
        T::RecloneRequired,
    ]
};

/// Admission's own check of a request of `S` on `group` as last observed:
/// no other operation in flight, and no condition saying the group is
/// unhealthy. The conditions are what the probes found, so a request's own
/// `OperationInProgress` (written with its `Pending`) never hides them; a
/// group never observed is not admitted.
pub(crate) fn admissible<S: RequestStatus>(group: &MysqlFailoverGroup) -> Result<(), String> {
    if let Some(other) = crate::failover::decision::other_operation(group, S::OPERATION) {
        return Err(format!("{other} is in flight; one operation at a time"));
    }
    let conditions = group.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    if conditions.is_empty() {
        return Err("the group has not been observed yet".to_owned());
    }
    let unhealthy = conditions.iter().find(|c| c.status == "True" && UNHEALTHY.iter().any(|t| t.as_str() == c.type_));
    match unhealthy {
        Some(c) => Err(format!("the group is not stable: {} ({}): {}", c.type_, c.reason, c.message)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(conditions: &[(&str, &str)], status: serde_json::Value) -> MysqlFailoverGroup {
        let mut status = status;
        status["conditions"] = conditions
            .iter()
            .map(|(t, s)| serde_json::json!({"type": t, "status": s, "reason": "R", "message": "m", "lastTransitionTime": "2026-12-01T00:00:00Z"}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlFailoverGroup",
            "metadata": {"name": "orders"},
            "spec": {"initialActiveSite": "iad", "sites": [
                {"name": "iad", "host": "h1", "port": 3306, "credentialsSecretRef": {"namespace": "n", "name": "s"}},
            ]},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_request_is_admitted_only_on_a_group_the_probes_found_healthy_whatever_its_own_mark_says() {
        let own = serde_json::json!({"stable": false, "unstableReason": "OperationInProgress",
            "orderedUpdate": {"requestId": "u1", "phase": "Admitting"}});
        let healthy = group(&[("Ready", "True"), ("Degraded", "False")], own.clone());
        assert_eq!(admissible::<OrderedUpdateStatus>(&healthy), Ok(()));
        for bad in ["Degraded", "NoPrimary", "SplitBrain", "ReplicationNotRunning", "RecloneRequired", "SiteDiverged"] {
            let g = group(&[("Ready", "False"), (bad, "True")], own.clone());
            let err = admissible::<OrderedUpdateStatus>(&g).unwrap_err();
            assert!(err.contains(bad), "{bad}: {err}");
        }
        assert!(admissible::<OrderedUpdateStatus>(&group(&[], own)).is_err(), "never observed");
        let busy = group(
            &[("Ready", "True")],
            serde_json::json!({"restoreInPlace": {"requestId": "r1", "phase": "Restoring"}}),
        );
        assert!(admissible::<OrderedUpdateStatus>(&busy).unwrap_err().contains("restore in place r1"));
    }

    #[test]
    fn a_final_phase_over_a_running_history_of_a_request_in_flight_was_not_the_operators_end() {
        use bloodraven_core::failover::planned::Phase;
        let is_final = |p: &str| Phase::parse(p).is_none_or(Phase::is_final);
        let entry =
            |phase: &str| PhaseTransition { phase: phase.to_owned(), time: Time(Timestamp::UNIX_EPOCH), message: None };
        let history = [entry("Pending"), entry("Admitting"), entry("Draining")];
        let terms = "p1 pdx iad 3";
        let mut rec = crate::failover::record::Record { in_flight: vec![terms.to_owned()], ..Default::default() };
        let ended = |rec: &crate::failover::record::Record, phase: &str, history: &[PhaseTransition]| {
            ended_by_hand(Some(rec), Some(terms), phase, history, is_final).map(str::to_owned)
        };
        // Written over a drain: it runs on from Draining. A phase that does
        // not parse counts as final, as the engine reads it.
        for shown in ["Failed", "Completed", "", "Stopped"] {
            assert_eq!(ended(&rec, shown, &history).as_deref(), Some("Draining"), "{shown}");
            assert!(may_be_ended_by_hand(shown, &history, is_final));
        }
        // The operator's own end: its history ends in the final phase.
        let mut own = history.to_vec();
        own.push(entry("Failed"));
        assert_eq!(ended(&rec, "Failed", &own), None);
        assert!(!may_be_ended_by_hand("Failed", &own, is_final));
        // A running phase is not an end; a history edited away says nothing.
        assert_eq!(ended(&rec, "Draining", &history), None);
        assert_eq!(ended(&rec, "Failed", &[]), None);
        // The record no longer holds it (ended, then written back), holds
        // it on other terms, or cannot be trusted: nothing runs.
        assert_eq!(ended_by_hand(Some(&rec), Some("p1 iad pdx 3"), "Failed", &history, is_final), None);
        assert_eq!(ended_by_hand(Some(&rec), None, "Failed", &history, is_final), None);
        assert_eq!(ended_by_hand(None, Some(terms), "Failed", &history, is_final), None);
        rec.tampered = Some("kubectl-edit".to_owned());
        assert_eq!(ended(&rec, "Failed", &history), None);
        rec.tampered = None;
        rec.in_flight.clear();
        assert_eq!(ended(&rec, "Failed", &history), None);
    }
}
