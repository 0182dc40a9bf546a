//! What the reconciler does with a group's deploy leases on each probe
//! (leader only):
//!
//! - revokes grants of an older topology generation (`TopologyChanged`), and
//!   every live grant when a person annotated the group with
//!   `revoke-deployment-leases` (`OperatorRevoked`; the annotation is then
//!   removed), with one `DeploymentLeaseRevoked` Event per operation;
//! - turns a grant that was revoked or lapsed after reporting
//!   `ddlState: started` into a verification record, announced once by a
//!   `SchemaVerificationRequired` Event naming the operation and instance;
//! - computes the `SchemaVerificationRequired` condition from the records,
//!   and clears the records a person names in the `schema-verified`
//!   annotation (a list of operationIds, or `all`), with a `SchemaVerified`
//!   Event, then removes the annotation.

use bloodraven_api::deploy::valid_operation_id;
use bloodraven_api::names::{REVOKE_DEPLOYMENT_LEASES_ANNOTATION, SCHEMA_VERIFIED_ANNOTATION};
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

async fn remove_annotation(ctx: &Context, group: &str, annotation: &str) -> Result<(), Error> {
    let api: Api<MysqlFailoverGroup> = Api::all(ctx.client.clone());
    let patch = json!({"metadata": {"annotations": {annotation: null}}});
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
    let requested = group.annotations().contains_key(REVOKE_DEPLOYMENT_LEASES_ANNOTATION);
    let done = service
        .maintain(&name, requested)
        .await
        .map_err(|e| Error::leases("revoke and sweep the deploy leases")(e.into()))?;
    for t in &done.revoked {
        ctx.metrics.deploy_leases_revoked_total.with_label_values(&[t.reason.as_str()]).inc();
        tracing::warn!(group = %name, operation_id = %t.operation_id, instance = %t.instance, reason = t.reason.as_str(), generation = t.generation, "deploy lease revoked");
        let ddl = t.ddl_state.map_or(String::new(), |d| format!("; its DDL state was {}", d.as_str()));
        let note = format!(
            "revoked deploy operation {} (instance {}) with reason {} at topology generation {}{ddl}",
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
        remove_annotation(ctx, &name, REVOKE_DEPLOYMENT_LEASES_ANNOTATION).await?;
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
            let note = format!("a person verified the schema after operation(s) {}", ops.join(", "));
            publish(ctx, group, EventType::Normal, reason::SCHEMA_VERIFIED, note, "VerifySchema", None).await;
        }
        if let Some(note) = unmatched(value, &cleared, &kept) {
            tracing::warn!(group = %name, "{note}");
            publish(ctx, group, EventType::Warning, reason::SCHEMA_VERIFIED_UNMATCHED, note, "VerifySchema", None)
                .await;
        }
        remove_annotation(ctx, &name, SCHEMA_VERIFIED_ANNOTATION).await?;
        pending = kept;
    }
    for p in pending.iter_mut().filter(|p| !p.announced) {
        let v = &p.verification;
        let note = format!(
            "deploy operation {} (instance {}{}) {} ({}, at topology generation {}) after its DDL had started: verify the schema, then annotate the group {SCHEMA_VERIFIED_ANNOTATION}={}",
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
            "deploy operation(s) {}{more} ended inside their DDL (revoked, lapsed or released before the DDL finished): the schema may be half changed; verify it, then `kubectl annotate mfg {group} {SCHEMA_VERIFIED_ANNOTATION}=<operationId>` (or `all`)",
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
    fn the_annotation_names_operations_or_all() {
        assert_eq!(named("all"), None);
        assert_eq!(named(" ALL "), None);
        assert_eq!(named(" op-1, op-2 ,bad id,"), Some(vec!["op-1", "op-2"]));
    }
}
