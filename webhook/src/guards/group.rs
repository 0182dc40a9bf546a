//! `MysqlFailoverGroup`: its status is the fence (`status.topologyGeneration`
//! with `status.activeSite`; docs/concepts.md, "The generation is the fence"), so
//! only the operator's ServiceAccount writes it, and even the operator only
//! moves the generation by +1 together with a change of the active site,
//! never down; and spec changes that would rewrite history are refused.
//! The `-by` annotations beside `revoke-deployment-leases` and
//! `schema-verified` name who asked, and the operator says it in its Events:
//! each may only be set to the requesting user's own name.

use bloodraven_api::names;
use serde_json::Value;

/// What the request's user is, for this guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    /// The operator's ServiceAccount.
    Operator,
    /// Anyone else (a cluster admin included).
    Other,
}

fn generation(object: &Value) -> Option<i64> {
    object.pointer("/status/topologyGeneration").and_then(Value::as_i64)
}

fn active_site(object: &Value) -> Option<&str> {
    object.pointer("/status/activeSite").and_then(Value::as_str)
}

/// Checks a write of a group's status (through `/status`, or through the
/// main resource when the status differs) by `writer`, from `old` to `new`.
///
/// Rules: another writer than the operator is refused outright. The
/// operator: a first generation (none stored: bootstrap, or a status
/// restored from the decision record after it was lost) must come with an
/// active site; after that the generation is never removed, never goes
/// down, stays with the same active site, or moves by exactly +1 with a
/// different one.
///
/// Errors: the refusal, saying what to do instead.
pub fn check_status(writer: Writer, operator: &str, old: &Value, new: &Value) -> Result<(), String> {
    if writer == Writer::Other {
        return Err(format!(
            "the status of a MysqlFailoverGroup is written only by the operator ({operator}): \
             status.topologyGeneration and status.activeSite are the fence every deploy lease is checked against. \
             To move the primary, request a planned failover (spec.plannedFailover {{targetSite, requestId}}); \
             to end every deploy lease, annotate the group bloodraven.shipstream.io/revoke-deployment-leases"
        ));
    }
    let (was, now) = (generation(old), generation(new));
    let (site_was, site_now) = (active_site(old), active_site(new));
    match (was, now) {
        (_, Some(n)) if n < 1 => Err(format!("status.topologyGeneration {n}: a generation is at least 1")),
        (None, Some(_)) if site_now.is_none() => {
            Err("status.topologyGeneration set without status.activeSite: they are written together".into())
        }
        (None, _) => Ok(()),
        (Some(w), None) => Err(format!(
            "status.topologyGeneration {w} may not be removed: a lease granted at {w} must keep failing its check"
        )),
        (Some(w), Some(n)) if n == w => {
            if site_now == site_was {
                Ok(())
            } else {
                Err(format!(
                    "status.activeSite changed from {} to {} without a new topologyGeneration (still {w}): a move of the primary is +1",
                    site_was.unwrap_or("<unset>"),
                    site_now.unwrap_or("<unset>")
                ))
            }
        }
        (Some(w), Some(n)) if n == w + 1 => {
            if site_now.is_some() && site_now != site_was {
                Ok(())
            } else {
                Err(format!(
                    "status.topologyGeneration {w} → {n} without a change of status.activeSite ({}): the generation moves only with the primary",
                    site_was.unwrap_or("<unset>")
                ))
            }
        }
        (Some(w), Some(n)) => Err(format!(
            "status.topologyGeneration {w} → {n}: it moves only by +1 together with status.activeSite, never down"
        )),
    }
}

/// Whether `new` sets the group's status to exactly what its decision
/// record says: the record (the data of ConfigMap
/// [`bloodraven_api::names::state::record_name`] in the operator's
/// namespace) names this group and its UID, and the same `activeSite` and
/// `topologyGeneration`. The record is the authority: the operator writes
/// every decision there first, and restores status from it when status was
/// edited (a forged +1 included), which [`check_status`] alone would refuse
/// as a move down.
pub fn restores_record(new: &Value, record: &std::collections::BTreeMap<String, String>) -> bool {
    let field = |k: &str| record.get(k).map(String::as_str);
    let name = new.pointer("/metadata/name").and_then(Value::as_str);
    let uid = new.pointer("/metadata/uid").and_then(Value::as_str);
    name.is_some()
        && uid.is_some()
        && field("group") == name
        && field("groupUID") == uid
        && active_site(new).is_some()
        && field("activeSite") == active_site(new)
        && generation(new).is_some_and(|g| field("topologyGeneration") == Some(g.to_string().as_str()))
}

/// Checks a spec update of a group from `old` to `new`: site names are
/// history (status, records and leases name them; the CRD's own rule says
/// the same for pairs), and `initialActiveSite` is read once, at bootstrap;
/// after that (`status.topologyGeneration` set) a change would tell readers
/// a different story from the one that happened.
///
/// Errors: the refusal, with the supported way.
pub fn check_spec(old: &Value, new: &Value) -> Result<(), String> {
    let names = |o: &Value| -> Vec<String> {
        o.pointer("/spec/sites")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|s| s.get("name").and_then(Value::as_str).map(str::to_owned))
            .collect()
    };
    let (before, after) = (names(old), names(new));
    if let Some(gone) = before.iter().find(|n| !after.contains(n)) {
        return Err(format!(
            "spec.sites: site {gone:?} may not be renamed or removed: status, the decision record and every deploy lease refer to it; create a new group to rename a site"
        ));
    }
    let initial = |o: &Value| o.pointer("/spec/initialActiveSite").and_then(Value::as_str).map(str::to_owned);
    if let Some(g) = generation(old)
        && initial(old) != initial(new)
    {
        return Err(format!(
            "spec.initialActiveSite may not change after bootstrap (the group is at topologyGeneration {g}, active site {}): it is read once. To move the primary, request a planned failover (spec.plannedFailover {{targetSite, requestId}})",
            active_site(old).unwrap_or("<unset>")
        ));
    }
    Ok(())
}

/// Each `-by` annotation: what it records, and the plugin command that
/// writes it beside the annotation it vouches for.
const REQUESTERS: [(&str, &str, &str, &str); 2] = [
    (
        names::REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION,
        names::REVOKE_DEPLOYMENT_LEASES_ANNOTATION,
        "who asked to revoke the deploy leases",
        "kubectl bloodraven revoke GROUP --reason TEXT",
    ),
    (
        names::SCHEMA_VERIFIED_BY_ANNOTATION,
        names::SCHEMA_VERIFIED_ANNOTATION,
        "who verified the schema",
        "kubectl bloodraven verify-schema GROUP OPERATION_ID...",
    ),
];

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a Value> {
    object.pointer("/metadata/annotations").and_then(|a| a.get(key))
}

/// Checks the `-by` annotations of a create (`old` is `None`) or an update
/// of a group by `user` (the review's `userInfo.username`), so that the
/// operator's Events name whoever really asked:
/// - a `-by` added or changed must be exactly `user`;
/// - the request it vouches for (`revoke-deployment-leases`,
///   `schema-verified`) added or changed must come with a `-by` of `user`,
///   or none: a `-by` left standing from someone else's earlier request
///   (the operator was down, or never acted) never vouches for a new one.
///
/// Removing either is always allowed (the operator removes both once it
/// acted), and both left as they were are not checked again (a later,
/// unrelated edit by someone else keeps them).
///
/// Errors: the refusal, naming the annotation, the user's own name and the
/// command that writes it.
pub fn check_requesters(user: &str, old: Option<&Value>, new: &Value) -> Result<(), String> {
    for (key, main, records, command) in REQUESTERS {
        let Some(value) = annotation(new, key) else { continue };
        let by_changed = old.and_then(|o| annotation(o, key)) != Some(value);
        let request_changed = annotation(new, main).is_some_and(|m| old.and_then(|o| annotation(o, main)) != Some(m));
        if !by_changed && !request_changed {
            continue;
        }
        if !user.is_empty() && value.as_str() == Some(user) {
            continue;
        }
        let shown = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
        let what = if by_changed {
            String::new()
        } else {
            format!(
                " This write changes {main}, so the {key} left beside it would vouch for a request its user did not make: set it to your own name, or remove it."
            )
        };
        return Err(format!(
            "annotation {key} records {records} and may only be set to your own username as the API server knows it \
             (`kubectl auth whoami`): \"{}\", not \"{}\".{what} Use `{command}`, which writes it, or leave the annotation out",
            bloodraven_serving::log::escape(user, 256),
            bloodraven_serving::log::escape(&shown, 256),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn at(site: Option<&str>, generation: Option<i64>) -> Value {
        let mut status = serde_json::Map::new();
        if let Some(s) = site {
            status.insert("activeSite".into(), json!(s));
        }
        if let Some(g) = generation {
            status.insert("topologyGeneration".into(), json!(g));
        }
        json!({"spec": {"initialActiveSite": "iad", "sites": [{"name": "iad"}, {"name": "pdx"}]}, "status": status})
    }

    /// A forged +1 made with the operator's own account is undone by the
    /// operator from its record: that restore moves the generation down, and
    /// passes only when it matches the record exactly.
    #[test]
    fn a_restore_to_the_record_passes_and_nothing_else_does() {
        let mut restored = at(Some("iad"), Some(3));
        restored["metadata"] = json!({"name": "g", "uid": "u-1"});
        let record = |site: &str, generation: &str, uid: &str| {
            std::collections::BTreeMap::from([
                ("group".to_owned(), "g".to_owned()),
                ("groupUID".to_owned(), uid.to_owned()),
                ("activeSite".to_owned(), site.to_owned()),
                ("topologyGeneration".to_owned(), generation.to_owned()),
            ])
        };
        assert!(restores_record(&restored, &record("iad", "3", "u-1")));
        assert!(!restores_record(&restored, &record("pdx", "3", "u-1")), "another site");
        assert!(!restores_record(&restored, &record("iad", "2", "u-1")), "another generation");
        assert!(!restores_record(&restored, &record("iad", "3", "u-2")), "an older group of the same name");
        let mut other = record("iad", "3", "u-1");
        other.insert("group".into(), "h".into());
        assert!(!restores_record(&restored, &other), "another group's record");
        assert!(!restores_record(&restored, &std::collections::BTreeMap::new()), "an empty record");
        let mut bare = at(Some("iad"), Some(3));
        bare["metadata"] = json!({"name": "g"});
        assert!(!restores_record(&bare, &record("iad", "3", "")), "no UID");
    }

    #[test]
    fn only_the_operator_writes_status_and_only_by_plus_one_with_the_site() {
        let op = "system:serviceaccount:bloodraven:bloodraven-operator";
        let e = check_status(Writer::Other, op, &at(Some("iad"), Some(3)), &at(Some("iad"), Some(3))).unwrap_err();
        assert!(e.contains(op) && e.contains("plannedFailover") && e.contains("revoke-deployment-leases"), "{e}");
        let ok = |a, b| check_status(Writer::Operator, op, &a, &b);
        ok(at(None, None), at(None, None)).unwrap();
        ok(at(None, None), at(Some("iad"), Some(1))).unwrap();
        ok(at(None, None), at(Some("pdx"), Some(7))).unwrap(); // restored from the record
        ok(at(Some("iad"), Some(3)), at(Some("iad"), Some(3))).unwrap();
        ok(at(Some("iad"), Some(3)), at(Some("pdx"), Some(4))).unwrap();
        for (a, b, says) in [
            (at(None, None), at(None, Some(1)), "without status.activeSite"),
            (at(None, None), at(Some("iad"), Some(0)), "at least 1"),
            (at(Some("iad"), Some(3)), at(Some("iad"), None), "may not be removed"),
            (at(Some("iad"), Some(3)), at(Some("pdx"), Some(3)), "without a new topologyGeneration"),
            (at(Some("iad"), Some(3)), at(Some("iad"), Some(4)), "without a change of status.activeSite"),
            (at(Some("iad"), Some(3)), at(Some("pdx"), Some(5)), "never down"),
            (at(Some("iad"), Some(3)), at(Some("pdx"), Some(2)), "never down"),
        ] {
            let e = ok(a, b).unwrap_err();
            assert!(e.contains(says), "{says}: {e}");
        }
    }

    fn annotated(pairs: &[(&str, &str)]) -> Value {
        let annotations: serde_json::Map<String, Value> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
        json!({"metadata": {"name": "g", "annotations": annotations}, "spec": {}})
    }

    #[test]
    fn a_by_annotation_names_only_the_user_who_sets_it() {
        const REVOKE: &str = names::REVOKE_DEPLOYMENT_LEASES_ANNOTATION;
        const REVOKE_BY: &str = names::REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION;
        const VERIFIED: &str = names::SCHEMA_VERIFIED_ANNOTATION;
        const VERIFIED_BY: &str = names::SCHEMA_VERIFIED_BY_ANNOTATION;
        let none = annotated(&[]);
        let alice_revokes = annotated(&[(REVOKE, "stuck migration in ci"), (REVOKE_BY, "alice")]);
        let alice_verified = annotated(&[(VERIFIED, "op-1"), (VERIFIED_BY, "alice")]);
        // (user, old, new, refused naming)
        let cases: [(&str, Option<&Value>, &Value, Option<&str>); 15] = [
            ("alice", Some(&none), &alice_revokes, None),
            ("alice", Some(&none), &alice_verified, None),
            ("bob", Some(&none), &alice_revokes, Some(REVOKE_BY)),
            ("bob", Some(&none), &alice_verified, Some(VERIFIED_BY)),
            // Removal: the operator, or anyone.
            ("system:serviceaccount:bloodraven:bloodraven-operator", Some(&alice_revokes), &none, None),
            ("bob", Some(&alice_verified), &annotated(&[(VERIFIED, "op-1")]), None),
            // Left as it was: bob's unrelated edit is not refused for alice's name.
            ("bob", Some(&alice_revokes), &alice_revokes, None),
            // Changed to another name, even bob's own old one.
            ("bob", Some(&alice_revokes), &annotated(&[(REVOKE, "now"), (REVOKE_BY, "carol")]), Some(REVOKE_BY)),
            ("bob", Some(&alice_revokes), &annotated(&[(REVOKE, "now"), (REVOKE_BY, "bob")]), None),
            // A request changed under a -by left standing from someone else's.
            (
                "bob",
                Some(&alice_revokes),
                &annotated(&[(REVOKE, "bob: drop them all"), (REVOKE_BY, "alice")]),
                Some(REVOKE_BY),
            ),
            ("bob", Some(&annotated(&[(VERIFIED_BY, "alice")])), &alice_verified, Some(VERIFIED_BY)),
            // ... or with it removed (a hand-written request), or set to bob.
            ("bob", Some(&alice_revokes), &annotated(&[(REVOKE, "bob: drop them all")]), None),
            ("bob", Some(&alice_revokes), &annotated(&[(REVOKE, "bob: drop them all"), (REVOKE_BY, "bob")]), None),
            // A create: nothing was there before.
            ("bob", None, &alice_verified, Some(VERIFIED_BY)),
            ("alice", None, &alice_verified, None),
        ];
        for (i, (user, old, new, refused)) in cases.into_iter().enumerate() {
            match (check_requesters(user, old, new), refused) {
                (Ok(()), None) => {}
                (Err(e), Some(key)) => {
                    assert!(e.contains(key) && e.contains(&format!("\"{user}\"")), "case {i}: {e}");
                    assert!(e.contains("kubectl bloodraven"), "case {i}: {e}");
                }
                (r, _) => panic!("case {i}: {user} {new}: {r:?}, wanted refused: {refused:?}"),
            }
        }
        let e = check_requesters("bob", None, &annotated(&[(VERIFIED_BY, "alice")])).unwrap_err();
        assert!(e.contains("verify-schema") && e.contains("your own username"), "{e}");
        let e = check_requesters("bob", None, &annotated(&[(REVOKE_BY, "alice")])).unwrap_err();
        assert!(e.contains("kubectl bloodraven revoke"), "{e}");
        // An empty value names nobody; a user without a name sets nothing.
        assert!(check_requesters("bob", None, &annotated(&[(REVOKE_BY, "")])).is_err());
        assert!(check_requesters("", None, &annotated(&[(REVOKE_BY, "")])).is_err());
        // The refused value is user text: escaped in the answer.
        let e = check_requesters("bob", None, &annotated(&[(REVOKE_BY, "alice\u{202e}\n")])).unwrap_err();
        assert!(!e.contains('\u{202e}') && !e.contains('\n'), "{e}");
    }

    #[test]
    fn history_in_the_spec_is_not_rewritten() {
        let mut renamed = at(Some("iad"), Some(2));
        renamed["spec"]["sites"][1]["name"] = json!("sfo");
        assert!(check_spec(&at(Some("iad"), Some(2)), &renamed).unwrap_err().contains("\"pdx\""));
        let mut moved = at(Some("iad"), Some(2));
        moved["spec"]["initialActiveSite"] = json!("pdx");
        let e = check_spec(&at(Some("iad"), Some(2)), &moved).unwrap_err();
        assert!(e.contains("after bootstrap") && e.contains("plannedFailover"), "{e}");
        // Before bootstrap it may still change; a third site may be added.
        let mut fresh = at(None, None);
        check_spec(&fresh.clone(), &{
            fresh["spec"]["initialActiveSite"] = json!("pdx");
            fresh.clone()
        })
        .unwrap();
        let mut more = at(Some("iad"), Some(2));
        more["spec"]["sites"].as_array_mut().unwrap().push(json!({"name": "sfo"}));
        check_spec(&at(Some("iad"), Some(2)), &more).unwrap();
    }
}
