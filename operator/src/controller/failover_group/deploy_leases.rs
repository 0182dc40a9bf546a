//! What the reconciler does with a group's deploy leases on each probe
//! (leader only):
//!
//! - revokes grants of an older topology generation (`TopologyChanged`), and
//!   every live grant when a person annotated the group with
//!   `revoke-deployment-leases` (`OperatorRevoked`; the annotation is then
//!   removed), with one `DeploymentLeaseRevoked` Event per operation, naming
//!   who asked (`revoke-deployment-leases-by`) and why (the annotation's
//!   value);
//! - turns a grant that was revoked or lapsed after reporting
//!   `ddlState: started` into a verification record, announced once by a
//!   `SchemaVerificationRequired` Event naming the operation and instance;
//! - computes the `SchemaVerificationRequired` condition from the records,
//!   and clears the records a person names in the `schema-verified`
//!   annotation (a list of operationIds, or `all`), with a `SchemaVerified`
//!   Event naming who verified (`schema-verified-by`), then removes the
//!   annotation.
//!
//! The `-by` annotations are removed in the same patch as the annotation
//! they accompany. The webhook admits only the requesting user's own name in
//! them (docs/webhook.md, `group-history`); a hand-written annotation without
//! one is acted on all the same, and its Event names nobody. Their values
//! are user text: Events show them escaped and cut ([`shown`]).

use bloodraven_api::deploy::RevokeReason;
use bloodraven_api::deploy::valid_operation_id;
use bloodraven_api::names::{
    REVOKE_DEPLOYMENT_LEASES_ANNOTATION, REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION, SCHEMA_VERIFIED_ANNOTATION,
    SCHEMA_VERIFIED_BY_ANNOTATION,
};
use bloodraven_api::v1alpha1::{ConditionType, MysqlFailoverGroup, reason};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::publish;
use crate::controller::conditions::Computed;
use crate::controller::{Context, Error, kube_err};
use crate::lease::store::{GroupKey, Pending, tombstone_name};

fn lease_ref(ctx: &Context, name: String) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("coordination.k8s.io/v1".into()),
        kind: Some("Lease".into()),
        namespace: Some(ctx.namespace.clone()),
        name: Some(name),
        ..Default::default()
    }
}

/// Removes an acted-on annotation and, in the same patch, its `-by`
/// annotation: a `-by` left behind would be read as the requester of the
/// next request made without one.
async fn remove_annotation(ctx: &Context, group: &str, annotation: &str, by: &str) -> Result<(), Error> {
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    let patch = json!({"metadata": {"annotations": {annotation: null, by: null}}});
    api.patch(group, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(kube_err("remove an acted-on annotation"))
}

/// Revokes and sweeps the group's deploy leases (when the deploy API is
/// enabled), publishing one Event per revoked operation.
pub(crate) async fn maintain(ctx: &Context, group: &MysqlFailoverGroup) -> Result<(), Error> {
    if !ctx.deploy_api {
        return Ok(());
    }
    let service = &ctx.leases;
    if !ctx.leadership.is_leader() {
        return Ok(());
    }
    let name = group.name_any();
    let annotations = group.annotations();
    let requested = annotations.contains_key(REVOKE_DEPLOYMENT_LEASES_ANNOTATION);
    let asked = requested_clause(
        annotations.get(REVOKE_DEPLOYMENT_LEASES_ANNOTATION).map(String::as_str),
        annotations.get(REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION).map(String::as_str),
    );
    let done = service
        .maintain(&name, requested)
        .await
        .map_err(|e| Error::leases("revoke and sweep the deploy leases")(e.into()))?;
    for t in &done.revoked {
        ctx.metrics.deploy_leases_revoked_total.with_label_values(&[t.reason.as_str()]).inc();
        tracing::warn!(group = %name, operation_id = %t.operation_id, instance = %t.instance, reason = t.reason.as_str(), generation = t.generation, "deploy lease revoked");
        let ddl = t.ddl_state.map_or(String::new(), |d| format!("; its DDL state was {}", d.as_str()));
        // Only the annotation's own revocations were asked for by a person.
        let asked = if t.reason == RevokeReason::OperatorRevoked { asked.as_str() } else { "" };
        let note = format!(
            "revoked deploy operation {} (instance {}) with reason {} at topology generation {}{ddl}{asked}",
            t.operation_id,
            t.instance,
            t.reason.as_str(),
            t.generation
        );
        // The tombstone as the related object: one Event per revoked
        // operation, not one series per group.
        let related = Some(lease_ref(ctx, tombstone_name(&name, t.client.as_deref(), &t.operation_id)));
        publish(ctx, group, EventType::Warning, "DeploymentLeaseRevoked", note, "RevokeDeploymentLeases", related)
            .await;
    }
    if requested {
        remove_annotation(ctx, &name, REVOKE_DEPLOYMENT_LEASES_ANNOTATION, REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION)
            .await?;
    } else if annotations.contains_key(REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION) {
        // A -by with no request beside it vouches for nothing, and must not
        // be found standing by someone's later request.
        remove_annotation(ctx, &name, REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION, REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION)
            .await?;
    }
    Ok(())
}

/// [`maintain`] right after a decision, where a failure must not stop what
/// follows (the promotion, the status write): the new generation already
/// revokes every lease, since a renewal compares it with the grant's; the
/// tombstones and Events are written by the next round's pass.
///
/// It runs between a decision and the promotion, so it is bounded by the
/// group's probe timeout: a slow lease store never holds a decided
/// promotion back.
pub(crate) async fn maintain_after_decision(ctx: &Context, group: &MysqlFailoverGroup) {
    let bound = std::time::Duration::from_secs(u64::from(group.spec.failover.probe_timeout_seconds.clamp(1, 60)));
    match tokio::time::timeout(bound, maintain(ctx, group)).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => {
            tracing::warn!(group = %group.name_any(), error = %err, "could not record the revocations of a decision yet; the next round does");
        }
        Err(_) => {
            tracing::warn!(group = %group.name_any(), bound_seconds = bound.as_secs(), "the deploy-lease store did not answer within probeTimeoutSeconds after a decision; the next round records the revocations");
        }
    }
}

/// The most of an annotation's value an Event shows, in bytes after
/// escaping: a requester's name or a reason, not a document. Two of them
/// and the note's own words stay within an Event note's 1 KiB.
const SHOWN_BYTES: usize = 256;

/// A user-written annotation value as an Event shows it: control and
/// bidirectional-formatting characters escaped, cut to [`SHOWN_BYTES`]
/// with `…`.
fn shown(value: &str) -> String {
    crate::tolerant::decode::bounded(value, SHOWN_BYTES)
}

/// What a `DeploymentLeaseRevoked` note of a revocation asked for by the
/// `revoke-deployment-leases` annotation adds: `; requested by BY
/// ("REASON")`. `reason` is the annotation's value, left out when it is
/// empty or `now` (the value that says nothing more); `by` its `-by`
/// annotation, left out when absent or empty (a hand-written annotation).
/// Empty when both are left out.
fn requested_clause(reason: Option<&str>, by: Option<&str>) -> String {
    let by = by.map(str::trim).filter(|b| !b.is_empty()).map(|b| format!(" by {}", shown(b)));
    let reason = reason
        .map(str::trim)
        .filter(|r| !r.is_empty() && !r.eq_ignore_ascii_case("now"))
        .map(|r| format!(" (\"{}\")", shown(&r.replace('"', "\\\""))));
    if by.is_none() && reason.is_none() {
        return String::new();
    }
    format!("; requested{}{}", by.unwrap_or_default(), reason.unwrap_or_default())
}

/// The `SchemaVerified` note for the cleared operations `ops`: who verified
/// (the `schema-verified-by` annotation), or "a person" when it is absent.
fn verified_note(by: Option<&str>, ops: &[&str]) -> String {
    let who = by.map(str::trim).filter(|b| !b.is_empty()).map_or_else(|| "a person".to_owned(), shown);
    format!("{who} verified the schema after operation(s) {}", ops.join(", "))
}

/// Which operationIds the `schema-verified` annotation names (`None`: all).
fn named(value: &str) -> Option<Vec<&str>> {
    if value.trim().eq_ignore_ascii_case("all") {
        return None;
    }
    Some(value.split(',').map(str::trim).filter(|op| valid_operation_id(op)).collect())
}

/// What of the `schema-verified` annotation `value` cleared nothing, in
/// words, or `None` when every part of it did: a mistyped operationId is
/// otherwise removed with the annotation and nobody learns that the
/// verification still awaits them. `cleared` are the records it cleared,
/// `kept` those still pending.
fn unmatched(value: &str, cleared: &[Pending], kept: &[Pending]) -> Option<String> {
    let pending_words = || {
        let announced: Vec<&str> =
            kept.iter().filter(|p| p.announced).map(|p| p.verification.operation_id.as_str()).collect();
        if announced.is_empty() {
            "none awaits verification".to_owned()
        } else {
            format!("awaiting verification: {}", announced.join(", "))
        }
    };
    let shown = format!("{:?}", crate::tolerant::decode::bounded(value, 200));
    if value.trim().eq_ignore_ascii_case("all") {
        return cleared.is_empty().then(|| {
            format!(
                "annotation {SCHEMA_VERIFIED_ANNOTATION}={shown} cleared nothing and was removed: {}",
                pending_words()
            )
        });
    }
    let mut missed: Vec<String> = Vec::new();
    for op in value.split(',').map(str::trim).filter(|op| !op.is_empty()) {
        if !valid_operation_id(op) {
            missed.push(format!("{:?} (not an operationId)", crate::tolerant::decode::bounded(op, 80)));
        } else if kept.iter().any(|p| p.verification.operation_id == op) {
            missed.push(format!("{op} (announced only now: verify, then annotate again)"));
        } else if !cleared.iter().any(|p| p.verification.operation_id == op) {
            missed.push(format!("{op} (no such verification pending)"));
        }
    }
    if missed.is_empty() && !value.trim().is_empty() {
        return None;
    }
    if missed.is_empty() {
        missed.push("an empty value".to_owned());
    }
    Some(format!(
        "annotation {SCHEMA_VERIFIED_ANNOTATION}={shown} was removed; it cleared nothing for {}; {}",
        missed.join(", "),
        pending_words()
    ))
}

/// The `SchemaVerificationRequired` condition, after announcing new records
/// and clearing those a person verified.
pub(crate) async fn verification_condition(ctx: &Context, group: &MysqlFailoverGroup) -> Result<Computed, Error> {
    let name = group.name_any();
    let key = GroupKey::of(group);
    let store_err =
        |e: crate::lease::store::StoreError| Error::leases("read or write the verification records")(e.into());
    let mut pending = ctx.leases.verifications(&key).await.map_err(store_err)?;
    if !ctx.leadership.is_leader() {
        return Ok(condition_of(&name, &pending));
    }
    // Clear first, and only records already announced: a person can only
    // have verified what they were told about. A record made in this pass,
    // or while the operator was down after the annotation was set, is
    // announced below and waits for the next annotation.
    if let Some(value) = group.annotations().get(SCHEMA_VERIFIED_ANNOTATION) {
        let wanted = named(value);
        let (cleared, kept): (Vec<Pending>, Vec<Pending>) = pending.into_iter().partition(|p| {
            p.announced && wanted.as_ref().is_none_or(|ops| ops.contains(&p.verification.operation_id.as_str()))
        });
        for p in &cleared {
            // The record as listed, by its own name.
            ctx.leases.delete_record(&p.name).await.map_err(store_err)?;
        }
        if !cleared.is_empty() {
            let ops: Vec<&str> = cleared.iter().map(|p| p.verification.operation_id.as_str()).collect();
            let by = group.annotations().get(SCHEMA_VERIFIED_BY_ANNOTATION).map(String::as_str);
            let note = verified_note(by, &ops);
            publish(ctx, group, EventType::Normal, reason::SCHEMA_VERIFIED, note, "VerifySchema", None).await;
        }
        if let Some(note) = unmatched(value, &cleared, &kept) {
            tracing::warn!(group = %name, "{note}");
            publish(ctx, group, EventType::Warning, reason::SCHEMA_VERIFIED_UNMATCHED, note, "VerifySchema", None)
                .await;
        }
        remove_annotation(ctx, &name, SCHEMA_VERIFIED_ANNOTATION, SCHEMA_VERIFIED_BY_ANNOTATION).await?;
        pending = kept;
    } else if group.annotations().contains_key(SCHEMA_VERIFIED_BY_ANNOTATION) {
        // As for a revocation's: a -by alone vouches for nothing.
        remove_annotation(ctx, &name, SCHEMA_VERIFIED_BY_ANNOTATION, SCHEMA_VERIFIED_BY_ANNOTATION).await?;
    }
    for p in pending.iter_mut().filter(|p| !p.announced) {
        let v = &p.verification;
        let note = format!(
            "deploy operation {} (instance {}{}) {} ({}, at topology generation {}) after its DDL had started: verify the schema, then `kubectl bloodraven verify-schema {name} {}` (or annotate the group {SCHEMA_VERIFIED_ANNOTATION}=<operationId>)",
            v.operation_id,
            v.instance,
            revision_clause(v.revision.as_deref()),
            if v.ending == bloodraven_core::lease::machine::Ending::Released {
                "ended without completing"
            } else {
                "lost its lease"
            },
            v.ending.as_str(),
            v.generation,
            v.operation_id
        );
        tracing::warn!(group = %name, operation_id = %v.operation_id, instance = %v.instance, ending = v.ending.as_str(), "schema verification required");
        let related = Some(lease_ref(ctx, p.name.clone()));
        publish(ctx, group, EventType::Warning, reason::SCHEMA_VERIFICATION_REQUIRED, note, "VerifySchema", related)
            .await;
        ctx.leases.mark_announced(&p.name).await.map_err(store_err)?;
        p.announced = true;
    }
    Ok(condition_of(&name, &pending))
}

/// `, revision R` when the operation reported one.
fn revision_clause(revision: Option<&str>) -> String {
    revision.map(|r| format!(", revision {r}")).unwrap_or_default()
}

fn condition_of(group: &str, pending: &[Pending]) -> Computed {
    let type_ = ConditionType::SchemaVerificationRequired.as_str();
    if pending.is_empty() {
        return Computed::flag(
            type_,
            false,
            reason::NO_VERIFICATION_PENDING,
            "no deploy operation ended inside its DDL",
        );
    }
    let listed: Vec<String> = pending
        .iter()
        .take(5)
        .map(|p| {
            format!(
                "{} (instance {}{}, {})",
                p.verification.operation_id,
                p.verification.instance,
                revision_clause(p.verification.revision.as_deref()),
                p.verification.ending.as_str()
            )
        })
        .collect();
    let more = if pending.len() > 5 { format!(" and {} more", pending.len() - 5) } else { String::new() };
    Computed::flag(
        type_,
        true,
        reason::SCHEMA_VERIFICATION_REQUIRED,
        format!(
            "deploy operation(s) {}{more} ended inside their DDL (revoked, lapsed or released before the DDL finished): the schema may be half changed; verify it, then `kubectl bloodraven verify-schema {group} <operationId>` (or annotate the group {SCHEMA_VERIFIED_ANNOTATION}=<operationId>, or `all`)",
            listed.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(op: &str, announced: bool) -> Pending {
        Pending {
            verification: bloodraven_core::lease::machine::Verification {
                operation_id: op.into(),
                instance: "counter-app".into(),
                revision: None,
                ending: bloodraven_core::lease::machine::Ending::Lapsed,
                generation: 2,
                client: None,
            },
            name: format!("bloodraven-verify-{op}"),
            announced,
        }
    }

    #[test]
    fn an_annotation_that_clears_nothing_says_so() {
        let kept = [pending("op-real", true), pending("op-new", false)];
        let note = unmatched("op-typo", &[], &kept).unwrap();
        assert!(note.contains("op-typo (no such verification pending)"), "{note}");
        assert!(note.contains("awaiting verification: op-real"), "{note}");
        assert!(!note.contains("op-new,") && !note.ends_with("op-new"), "an unannounced record is not listed: {note}");
        let note = unmatched("op-new", &[], &kept).unwrap();
        assert!(note.contains("announced only now"), "{note}");
        let note = unmatched("bad id\u{202e}", &[], &[]).unwrap();
        assert!(note.contains("not an operationId") && note.contains("none awaits verification"), "{note}");
        assert!(!note.contains('\u{202e}'), "raw control text reached the note: {note}");
        assert!(unmatched("all", &[], &kept).unwrap().contains("cleared nothing"));
        assert!(unmatched(" ", &[], &[]).unwrap().contains("an empty value"));
        // What did clear is not reported.
        let cleared = [pending("op-a", true)];
        assert_eq!(unmatched("op-a", &cleared, &[]), None);
        assert_eq!(unmatched("all", &cleared, &[]), None);
        let note = unmatched("op-a, op-b", &cleared, &[]).unwrap();
        assert!(note.contains("op-b (no such") && !note.contains("op-a ("), "{note}");
    }

    #[test]
    fn a_revocation_asked_for_by_annotation_says_who_and_why() {
        for (reason, by, says) in [
            (Some("stuck migration in ci"), Some("alice"), "; requested by alice (\"stuck migration in ci\")"),
            (Some("now"), Some("alice"), "; requested by alice"),
            (Some(" NOW "), Some("alice"), "; requested by alice"),
            (Some(""), Some("alice"), "; requested by alice"),
            (Some("stuck"), None, "; requested (\"stuck\")"),
            (Some("stuck"), Some(""), "; requested (\"stuck\")"),
            (Some("now"), None, ""),
            (None, None, ""),
            (Some("say \"hi\""), Some("alice"), "; requested by alice (\"say \\\"hi\\\"\")"),
        ] {
            assert_eq!(requested_clause(reason, by), says, "{reason:?} {by:?}");
        }
    }

    #[test]
    fn user_text_in_a_note_is_escaped_and_cut() {
        let clause = requested_clause(Some("a\nFAKE: line\u{202e}"), Some("mallory\u{1b}[31m"));
        assert!(!clause.contains('\n') && !clause.contains('\u{202e}') && !clause.contains('\u{1b}'), "{clause}");
        assert!(clause.contains("mallory\\u{1b}[31m"), "{clause}");
        let long = "x".repeat(10_000);
        let clause = requested_clause(Some(&long), Some("alice"));
        assert!(clause.len() < 300 && clause.contains('…'), "{}", clause.len());
        assert_eq!(shown(&"x".repeat(SHOWN_BYTES)), "x".repeat(SHOWN_BYTES), "exactly the limit is not cut");
    }

    #[test]
    fn a_verification_names_who_verified() {
        assert_eq!(
            verified_note(Some("alice"), &["op-1", "op-2"]),
            "alice verified the schema after operation(s) op-1, op-2"
        );
        assert_eq!(verified_note(None, &["op-1"]), "a person verified the schema after operation(s) op-1");
        assert_eq!(verified_note(Some(" "), &["op-1"]), "a person verified the schema after operation(s) op-1");
        assert!(!verified_note(Some("bob\r\nop-9"), &["op-1"]).contains('\n'));
    }

    #[test]
    fn the_annotation_names_operations_or_all() {
        assert_eq!(named("all"), None);
        assert_eq!(named(" ALL "), None);
        assert_eq!(named(" op-1, op-2 ,bad id,"), Some(vec!["op-1", "op-2"]));
    }
}
