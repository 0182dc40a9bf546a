//! `MysqlDatabase.spec.deploymentClients`: who may act for an instance on
//! the deploy API (docs/deploy-api.md, "Who may ask"). The list must be
//! well-formed (one entry per namespace, valid names), and every change to
//! it — a create with entries, an update that changes an entry, a delete of
//! an object with entries — needs the dedicated verb [`VERB`] on
//! `mysqldatabases`, in the MysqlDatabase's namespace and in the namespace
//! of every entry the change touches (checked with SubjectAccessReviews,
//! [`crate::review`]). Editing the object otherwise needs only `update`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// The RBAC verb on `mysqldatabases.bloodraven.shipstream.io` that allows a
/// change of `spec.deploymentClients`.
pub const VERB: &str = "set-deployment-clients";

/// The longest list the CRD accepts.
pub const MAX_CLIENTS: usize = 64;

/// `(namespace, serviceAccount)` pairs of a well-formed list, by namespace.
pub type Clients = BTreeMap<String, String>;

/// Whether `s` is an RFC 1123 label (a namespace name): 1–63 characters of
/// `[a-z0-9-]`, starting and ending alphanumeric.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && is_dns_chars(s, false)
}

/// Whether `s` is an RFC 1123 subdomain (a ServiceAccount, MysqlDatabase or
/// group name): 1–253 characters of `[a-z0-9.-]`, starting and ending alphanumeric.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && is_dns_chars(s, true)
}

fn is_dns_chars(s: &str, dots: bool) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    alnum(b[0]) && alnum(b[b.len() - 1]) && b.iter().all(|&c| alnum(c) || c == b'-' || (dots && c == b'.'))
}

/// The clients of `object` (a MysqlDatabase as JSON), checked: one entry per
/// namespace, valid names, at most [`MAX_CLIENTS`]. Absent list: none.
///
/// Errors: the first problem, with its path (`spec.deploymentClients[2].namespace: …`).
pub fn parse(object: &Value) -> Result<Clients, String> {
    let Some(list) = object.pointer("/spec/deploymentClients") else { return Ok(Clients::new()) };
    let Some(list) = list.as_array() else {
        return Err("spec.deploymentClients: must be a list of {namespace, serviceAccount}".into());
    };
    if list.len() > MAX_CLIENTS {
        return Err(format!("spec.deploymentClients: {} entries; at most {MAX_CLIENTS}", list.len()));
    }
    let mut clients = Clients::new();
    for (i, entry) in list.iter().enumerate() {
        let field = |name: &str| entry.get(name).and_then(Value::as_str);
        let Some(namespace) = field("namespace").filter(|n| is_dns_label(n)) else {
            return Err(format!(
                "spec.deploymentClients[{i}].namespace: must be a namespace name (RFC 1123 label: lowercase letters, digits and '-', at most 63)"
            ));
        };
        let Some(account) = field("serviceAccount").filter(|n| is_dns_subdomain(n)) else {
            return Err(format!(
                "spec.deploymentClients[{i}].serviceAccount: must be a ServiceAccount name (RFC 1123 subdomain, at most 253)"
            ));
        };
        if clients.insert(namespace.to_owned(), account.to_owned()).is_some() {
            return Err(format!(
                "spec.deploymentClients[{i}].namespace: {namespace:?} is listed twice; one ServiceAccount per namespace"
            ));
        }
    }
    Ok(clients)
}

/// Every `(namespace, serviceAccount)` the stored `object` lists, read
/// leniently: an object stored before a schema change (or by hand, past
/// validation) must stay deletable and fixable, so entries that do not
/// parse are kept as far as they are strings.
fn lenient(object: Option<&Value>) -> BTreeSet<(String, String)> {
    let list = object.and_then(|o| o.pointer("/spec/deploymentClients")).and_then(Value::as_array);
    list.into_iter()
        .flatten()
        .map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
            (s("namespace"), s("serviceAccount"))
        })
        .collect()
}

/// The operation, as far as this guard cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Create.
    Create,
    /// Update (patches arrive as updates).
    Update,
    /// Delete.
    Delete,
}

/// What a request asks of the guard: `Ok(None)` nothing to authorize;
/// `Ok(Some(namespaces))` the namespaces where the user needs [`VERB`]
/// (the object's own first); `Err` a malformed new list.
pub fn namespaces_to_authorize(
    op: Op,
    own_namespace: &str,
    old: Option<&Value>,
    new: Option<&Value>,
) -> Result<Option<Vec<String>>, String> {
    let touched: BTreeSet<String> = match op {
        Op::Create => parse(new.unwrap_or(&Value::Null))?.into_keys().collect(),
        Op::Update => {
            let after: BTreeSet<(String, String)> = parse(new.unwrap_or(&Value::Null))?.into_iter().collect();
            let before = lenient(old);
            let owners = |o: Option<&Value>| o.and_then(|o| o.pointer("/metadata/ownerReferences")).cloned();
            if owners(old) == owners(new) {
                before.symmetric_difference(&after).map(|(ns, _)| ns.clone()).collect()
            } else {
                // New owners can get the garbage collector (a trusted
                // deleter) to delete the object: a delete by proxy, so it
                // needs what a delete needs.
                before.union(&after).map(|(ns, _)| ns.clone()).collect()
            }
        }
        Op::Delete => lenient(old).into_iter().map(|(ns, _)| ns).collect(),
    };
    if touched.is_empty() {
        return Ok(None);
    }
    // Each namespace costs a SubjectAccessReview; a stored list holds at
    // most MAX_CLIENTS, so a review naming more was not sent by the API
    // server for a real object and is refused without asking.
    if touched.len() > 2 * MAX_CLIENTS {
        return Err(format!(
            "spec.deploymentClients: the change touches {} namespaces; at most {} (a list holds at most {MAX_CLIENTS})",
            touched.len(),
            2 * MAX_CLIENTS
        ));
    }
    let mut namespaces = vec![own_namespace.to_owned()];
    // Entries that never parsed have no namespace to ask in: the object's own decides.
    namespaces.extend(touched.into_iter().filter(|ns| ns != own_namespace && is_dns_label(ns)));
    Ok(Some(namespaces))
}

/// The refusal for a user who lacks [`VERB`] in `missing` namespaces.
pub fn refusal(user: &str, name: &str, own_namespace: &str, missing: &[String]) -> String {
    let list = missing.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ");
    format!(
        "user {user:?} may not change spec.deploymentClients of MysqlDatabase {own_namespace}/{name}: it needs verb \
         {VERB:?} on mysqldatabases.bloodraven.shipstream.io in namespace(s) {list} (the database's own and every \
         client namespace the change adds or removes). A cluster admin grants it with a Role in each, e.g. \
         `kubectl create role deployment-clients-admin --verb={VERB} --resource=mysqldatabases.bloodraven.shipstream.io -n NAMESPACE` \
         and a RoleBinding (the chart's ClusterRole bloodraven-deployment-clients-admin has it)"
    )
}

/// Why the group named by a new MysqlDatabase (`object`, created in
/// `namespace`) will refuse its claim, as the operator would word it; `None`
/// when it may be accepted or the webhook cannot tell (no such group yet, a
/// spec it cannot read). The operator stays the authority: this only turns a
/// refusal it would record on the object's status into an answer at create
/// time, where `kubectl apply` and `helm install` show it.
///
/// `group` is the MysqlFailoverGroup as JSON, `labels` the namespace's
/// labels (`None`: unknown).
pub fn claim_refusal(
    namespace: &str,
    object: &Value,
    group: &Value,
    labels: Option<&BTreeMap<String, String>>,
) -> Option<String> {
    use bloodraven_api::v1alpha1::DatabaseNamespaces;
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let group_name = group.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let rule = group.pointer("/spec/allowedDatabases/namespaces").cloned().unwrap_or(Value::Null);
    let rule: DatabaseNamespaces =
        if rule.is_null() { DatabaseNamespaces::default() } else { serde_json::from_value(rule).ok()? };
    if !rule.admits(labels) {
        return Some(format!(
            "failover group {group_name} does not accept MysqlDatabases from namespace {namespace} \
             (spec.allowedDatabases.namespaces of the group; reason NamespaceNotAllowed): a cluster admin must allow \
             the namespace first, then create MysqlDatabase {name} again"
        ));
    }
    let claims = group.pointer("/status/instanceClaims").and_then(Value::as_array).into_iter().flatten();
    // Which namespace holds it is not the creator's to learn (a cluster
    // admin reads it in the group's status.instanceClaims).
    claims
        .filter(|c| c.get("instance").and_then(Value::as_str) == Some(name))
        .find_map(|c| c.get("namespace").and_then(Value::as_str))
        .filter(|holder| *holder != namespace)?;
    Some(format!(
        "another namespace claimed instance {name} on failover group {group_name} (reason NameConflict): choose \
         another name, or have a cluster admin hand the name over with the annotation {}={name} on the group",
        bloodraven_api::names::RELEASE_INSTANCE_ANNOTATION
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn db(clients: &Value) -> Value {
        json!({"metadata": {"name": "app", "namespace": "team"}, "spec": {"deploymentClients": clients}})
    }

    #[test]
    fn a_well_formed_list_parses_and_each_malformed_kind_says_where() {
        let ok = db(
            &json!([{"namespace": "ci", "serviceAccount": "deployer"}, {"namespace": "team", "serviceAccount": "a.b"}]),
        );
        assert_eq!(parse(&ok).unwrap().len(), 2);
        assert!(parse(&json!({"spec": {}})).unwrap().is_empty());
        for (bad, says) in [
            (json!("x"), "must be a list"),
            (
                json!([{"namespace": "ci", "serviceAccount": "a"}, {"namespace": "ci", "serviceAccount": "b"}]),
                "listed twice",
            ),
            (json!([{"namespace": "CI", "serviceAccount": "a"}]), "[0].namespace"),
            (json!([{"namespace": "ci"}]), "[0].serviceAccount"),
            (json!([{"namespace": "ci", "serviceAccount": "-a"}]), "[0].serviceAccount"),
            (json!([{"namespace": "a".repeat(64), "serviceAccount": "a"}]), "[0].namespace"),
            (json!([{"namespace": 7, "serviceAccount": "a"}]), "[0].namespace"),
        ] {
            let e = parse(&db(&bad)).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let many: Vec<Value> = (0..65).map(|i| json!({"namespace": format!("n{i}"), "serviceAccount": "a"})).collect();
        assert!(parse(&db(&json!(many))).unwrap_err().contains("at most 64"));
    }

    #[test]
    fn only_a_change_of_the_list_needs_the_verb_in_each_namespace_it_touches() {
        let a = db(&json!([{"namespace": "ci", "serviceAccount": "deployer"}]));
        let b = db(
            &json!([{"namespace": "ci", "serviceAccount": "deployer"}, {"namespace": "ops", "serviceAccount": "x"}]),
        );
        let none = db(&json!([]));
        let ask = |op, old: Option<&Value>, new: Option<&Value>| namespaces_to_authorize(op, "team", old, new).unwrap();
        assert_eq!(ask(Op::Create, None, Some(&none)), None);
        assert_eq!(ask(Op::Create, None, Some(&a)), Some(vec!["team".into(), "ci".into()]));
        assert_eq!(ask(Op::Update, Some(&a), Some(&a)), None, "another field changed");
        assert_eq!(ask(Op::Update, Some(&a), Some(&b)), Some(vec!["team".into(), "ops".into()]));
        assert_eq!(ask(Op::Update, Some(&b), Some(&a)), Some(vec!["team".into(), "ops".into()]));
        let renamed = db(&json!([{"namespace": "ci", "serviceAccount": "other"}]));
        assert_eq!(ask(Op::Update, Some(&a), Some(&renamed)), Some(vec!["team".into(), "ci".into()]));
        assert_eq!(ask(Op::Delete, Some(&b), None), Some(vec!["team".into(), "ci".into(), "ops".into()]));
        assert_eq!(ask(Op::Delete, Some(&none), None), None);
        // A malformed stored list stays deletable (the verb is still needed).
        let stored = db(&json!([{"namespace": "ci", "serviceAccount": 5}, {"namespace": "ci"}]));
        assert_eq!(ask(Op::Delete, Some(&stored), None), Some(vec!["team".into(), "ci".into()]));
        // New owner references (a delete by the garbage collector, by proxy) need the verb everywhere.
        let mut owned = a.clone();
        owned["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}]);
        assert_eq!(ask(Op::Update, Some(&a), Some(&owned)), Some(vec!["team".into(), "ci".into()]));
        assert_eq!(
            ask(
                Op::Update,
                Some(&none),
                Some(&{
                    let mut o = none.clone();
                    o["metadata"]["ownerReferences"] = json!([]);
                    o
                })
            ),
            None
        );
        // A review naming more namespaces than any stored list could is refused without SubjectAccessReviews.
        let huge: Vec<Value> = (0..200).map(|i| json!({"namespace": format!("n{i}"), "serviceAccount": "a"})).collect();
        let e = namespaces_to_authorize(Op::Delete, "team", Some(&db(&json!(huge))), None).unwrap_err();
        assert!(e.contains("touches 200 namespaces"), "{e}");
        // A malformed new list is refused before any authorization.
        assert!(namespaces_to_authorize(Op::Update, "team", Some(&a), Some(&db(&json!([{}])))).is_err());
    }

    #[test]
    fn the_refusal_names_the_verb_the_namespaces_and_how_to_grant_it() {
        let m = refusal("alice", "app", "team", &["team".into(), "ops".into()]);
        for part in ["alice", VERB, "\"team\", \"ops\"", "kubectl create role", "team/app"] {
            assert!(m.contains(part), "{part}: {m}");
        }
    }

    #[test]
    fn a_claim_the_group_will_refuse_is_named_with_the_operators_reason() {
        let app = json!({"metadata": {"name": "app"}, "spec": {"failoverGroupRef": {"name": "g"}}});
        let group = |namespaces: Value, claims: Value| {
            json!({"metadata": {"name": "g"}, "spec": {"allowedDatabases": {"namespaces": namespaces}},
                   "status": {"instanceClaims": claims}})
        };
        let labels = |ns: &str| BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), ns.to_owned())]);
        let only_team =
            json!({"from": "Selector", "selector": {"matchLabels": {"kubernetes.io/metadata.name": "team"}}});
        let none = json!([]);

        // No rule (the default), None, or a selector the namespace misses: NamespaceNotAllowed.
        let bare = json!({"metadata": {"name": "g"}, "spec": {}});
        for (g, ns) in [
            (bare.clone(), "team"),
            (group(json!({"from": "None"}), none.clone()), "team"),
            (group(only_team.clone(), none.clone()), "other"),
        ] {
            let m = claim_refusal(ns, &app, &g, Some(&labels(ns))).expect("refused");
            assert!(m.contains("NamespaceNotAllowed") && m.contains(&format!("namespace {ns}")), "{m}");
        }
        // Unknown labels under a selector: refused (the operator allows nothing then either).
        assert!(claim_refusal("team", &app, &group(only_team.clone(), none.clone()), None).is_some());
        // Admitted, and nobody else holds the name, or this namespace does.
        assert_eq!(claim_refusal("team", &app, &group(only_team.clone(), none.clone()), Some(&labels("team"))), None);
        let claimed = json!([{"instance": "app", "namespace": "team"}, {"instance": "x", "namespace": "other"}]);
        assert_eq!(claim_refusal("team", &app, &group(json!({"from": "All"}), claimed.clone()), None), None);
        // Another namespace holds the name: NameConflict, naming it and the hand-over annotation.
        let m = claim_refusal("other", &app, &group(json!({"from": "All"}), claimed), Some(&labels("other")))
            .expect("refused");
        assert!(m.contains("NameConflict") && m.contains("another namespace claimed instance app"), "{m}");
        assert!(!m.contains("team"), "the holder is not named: {m}");
        assert!(m.contains(bloodraven_api::names::RELEASE_INSTANCE_ANNOTATION), "{m}");
        // A rule the webhook cannot read: no early refusal (the operator decides).
        assert_eq!(claim_refusal("team", &app, &group(json!({"from": "Sometimes"}), json!([])), None), None);
    }
}
