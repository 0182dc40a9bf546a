//! The validating guards, called by the real kube-apiserver: each
//! tried with real requests as a cluster admin, as the operator's
//! ServiceAccount and as an ordinary tenant, allowed and refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failed step must fail the test

use bloodraven_api::v1alpha1::{MysqlDatabase, SecretRef, Site};
use bloodraven_e2e::deploy::{service_account, token};
use bloodraven_e2e::fixtures::{create_group, group};
use bloodraven_e2e::webhook::refusal;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::Subject;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use bloodraven_e2e::webhook::{GuardEnv as Env, guard_env as setup};

async fn as_sa(env: &Env, namespace: &str, name: &str) -> Client {
    service_account(&env.cluster, namespace, name).await;
    env.cluster.client_with_token(&token(&env.cluster, namespace, name, &[]).await).await
}

/// A Role `name` in `namespace` with `verbs` on `mysqldatabases`, bound to
/// ServiceAccount `subject` (namespace, name).
async fn role(env: &Env, namespace: &str, name: &str, verbs: &[&str], subject: (&str, &str)) {
    let sa = Subject {
        kind: "ServiceAccount".into(),
        name: subject.1.into(),
        namespace: Some(subject.0.into()),
        ..Subject::default()
    };
    let rule = ("bloodraven.shipstream.io", &["mysqldatabases"][..], verbs);
    bloodraven_e2e::operator::role(&env.cluster, namespace, name, rule, sa).await;
}

fn database(name: &str, clients: &serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlDatabase", "metadata": {"name": name},
           "spec": {"failoverGroupRef": {"name": "nowhere"}, "schema": "counter", "deploymentClients": clients}})
}

/// RBAC changes reach the authorizer's cache within moments: ask until it holds.
async fn eventually<F, Fut, T>(what: &str, f: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    bloodraven_e2e::wait_for(what, std::time::Duration::from_secs(20), || async {
        f().await.map_err(|e| e.to_string())
    })
    .await
}

#[tokio::test]
async fn a_change_of_deployment_clients_needs_the_verb_in_each_namespace_it_touches() {
    let env = setup("wh-clients").await;
    let (ns, ns2) = (env.ns.name.clone(), env.ns2.name.clone());
    let editor = as_sa(&env, &ns, "editor").await;
    role(&env, &ns, "edit-databases", &["get", "list", "create", "update", "patch", "delete"], (&ns, "editor")).await;
    let dbs = Api::<MysqlDatabase>::namespaced(editor.clone(), &ns);
    let raw = |v: serde_json::Value| serde_json::from_value::<MysqlDatabase>(v).unwrap();
    let pp = PostParams::default();

    // No clients: plain RBAC decides; nothing to authorize.
    let plain_db = raw(database("plain", &json!([])));
    eventually("the editor to create a database without clients", || dbs.create(&pp, &plain_db)).await;
    // With clients, the verb is needed: the refusal names it and the namespace.
    let with_ci = raw(database("app", &json!([{"namespace": ns, "serviceAccount": "deployer"}])));
    let m = refusal(dbs.create(&pp, &with_ci).await);
    assert!(
        m.contains("set-deployment-clients") && m.contains(&format!("\"{ns}\"")) && m.contains("kubectl create role"),
        "{m}"
    );
    // Granted in its own namespace: allowed.
    role(&env, &ns, "clients", &["set-deployment-clients"], (&ns, "editor")).await;
    eventually("the create with the verb granted", || dbs.create(&pp, &with_ci)).await;
    // Adding a client in another namespace needs the verb there too.
    let add = Patch::Merge(
        json!({"spec": {"deploymentClients": [{"namespace": ns, "serviceAccount": "deployer"}, {"namespace": ns2, "serviceAccount": "ci"}]}}),
    );
    let patch_params = PatchParams::default();
    let m = refusal(dbs.patch("app", &patch_params, &add).await);
    assert!(m.contains(&format!("\"{ns2}\"")) && !m.contains(&format!("\"{ns}\", ")), "only {ns2} is missing: {m}");
    role(&env, &ns2, "clients", &["set-deployment-clients"], (&ns, "editor")).await;
    eventually("the patch with the verb in both namespaces", || dbs.patch("app", &patch_params, &add)).await;

    // A tenant with update but not the verb: other fields change freely; the list, and a delete, do not.
    let plain = as_sa(&env, &ns, "plain").await;
    role(&env, &ns, "edit-only", &["get", "update", "patch", "delete"], (&ns, "plain")).await;
    let plain_dbs = Api::<MysqlDatabase>::namespaced(plain, &ns);
    let schema_edit = Patch::Merge(json!({"spec": {"schema": "counter2"}}));
    eventually("a schema edit without the verb", || plain_dbs.patch("app", &patch_params, &schema_edit)).await;
    let drop_one = json!({"spec": {"deploymentClients": [{"namespace": ns, "serviceAccount": "deployer"}]}});
    let m = refusal(plain_dbs.patch("app", &patch_params, &Patch::Merge(&drop_one)).await);
    assert!(m.contains("set-deployment-clients") && m.contains("system:serviceaccount"), "{m}");
    let m = refusal(plain_dbs.delete("app", &DeleteParams::default()).await);
    assert!(m.contains("set-deployment-clients"), "a delete of a database with clients needs the verb: {m}");
    // Found by an attack: an owner reference would get the garbage collector to delete it by proxy.
    let owner = Patch::Merge(
        json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "00000000-0000-0000-0000-000000000001"}]}}),
    );
    let m = refusal(plain_dbs.patch("app", &patch_params, &owner).await);
    assert!(m.contains("set-deployment-clients"), "new owners of a database with clients need the verb: {m}");
    plain_dbs
        .delete("plain", &DeleteParams::default())
        .await
        .expect("a database without clients is deleted with plain RBAC");

    // Malformed lists are refused with the field (by the CRD schema, before the webhook).
    // (The typed client cannot build such a list; the raw request can.)
    let twice =
        database("dup", &json!([{"namespace": ns, "serviceAccount": "a"}, {"namespace": ns, "serviceAccount": "b"}]));
    let raw_api = Api::<kube::api::DynamicObject>::namespaced_with(
        env.cluster.client.clone(),
        &ns,
        &kube::api::ApiResource::erase::<MysqlDatabase>(&()),
    );
    let m = refusal(raw_api.create(&pp, &serde_json::from_value(twice).unwrap()).await);
    assert!(m.contains("deploymentClients") && m.to_lowercase().contains("duplicate"), "{m}");

    // A cluster admin holds every verb: allowed; the delete goes through.
    let admin = Api::<MysqlDatabase>::namespaced(env.cluster.client.clone(), &ns);
    admin.delete("app", &DeleteParams::default()).await.expect("cluster-admin deletes");
    assert!(env.webhook.reviews("deployment-clients", "denied").await >= 3, "{}", env.webhook.metrics().await);
}

fn site(name: &str, host: &str) -> Site {
    Site {
        name: name.into(),
        host: host.into(),
        port: 3306,
        credentials_secret_ref: SecretRef { namespace: "nowhere".into(), name: "none".into() },
    }
}

/// A MysqlDatabase its group will refuse is refused when it is created,
/// with the reason the operator would record on its status: a `helm install`
/// (whose MysqlDatabase is a hook) fails at once and says why, instead of
/// waiting out its deadline. A group that does not exist yet refuses nothing
/// (the operator reports GroupNotFound; the order of a GitOps sync is free).
#[tokio::test]
async fn a_database_its_group_will_refuse_is_refused_when_created() {
    let env = setup("wh-claim").await;
    let (ns, ns2) = (env.ns.name.clone(), env.ns2.name.clone());
    let name = format!("{ns}-g");
    // The group admits namespace `ns` only (its label selector).
    create_group(&env.cluster, &group(&name, &ns, vec![site("iad", "192.0.2.1"), site("pdx", "192.0.2.2")], "iad"))
        .await;
    let pp = PostParams::default();
    let app = |group: &str| {
        let mut db = database("app", &json!([]));
        db["spec"]["failoverGroupRef"]["name"] = json!(group);
        serde_json::from_value::<MysqlDatabase>(db).unwrap()
    };
    let in_ns2 = Api::<MysqlDatabase>::namespaced(env.cluster.client.clone(), &ns2);

    // Another namespace: refused, naming the reason, the namespace and what to do.
    let m = refusal(in_ns2.create(&pp, &app(&name)).await);
    assert!(
        m.contains("NamespaceNotAllowed")
            && m.contains(&format!("namespace {ns2}"))
            && m.contains("allow the namespace"),
        "{m}"
    );
    assert!(in_ns2.get_opt("app").await.unwrap().is_none(), "nothing was stored");
    // No such group (yet): stored, for the operator to report.
    in_ns2.create(&pp, &app("no-such-group")).await.expect("a database of a group not yet created");
    in_ns2.delete("app", &DeleteParams::default()).await.unwrap();

    // The admitted namespace: stored. The operator claims the name for it.
    let in_ns = Api::<MysqlDatabase>::namespaced(env.cluster.client.clone(), &ns);
    in_ns.create(&pp, &app(&name)).await.expect("the admitted namespace");
    let operator = Api::<bloodraven_api::v1alpha1::MysqlFailoverGroup>::all(
        as_sa(&env, &env.op_ns.name, "bloodraven-operator").await,
    );
    let claims = json!({"status": {"instanceClaims": [{"instance": "app", "namespace": ns}]}});
    operator.patch_status(&name, &PatchParams::default(), &Patch::Merge(claims)).await.unwrap();

    // Every namespace admitted now, but `ns` holds the name: NameConflict.
    let all = json!({"spec": {"allowedDatabases": {"namespaces": {"from": "All", "selector": null}}}});
    env.cluster.groups().patch(&name, &PatchParams::default(), &Patch::Merge(all)).await.unwrap();
    let m = refusal(in_ns2.create(&pp, &app(&name)).await);
    assert!(m.contains("NameConflict") && m.contains("another namespace claimed instance app"), "{m}");
    assert!(
        !m.replace(&name, "the group").contains(&ns),
        "the namespace holding the name is not the creator's to learn: {m}"
    );
    // Another name is free.
    let mut other = app(&name);
    other.metadata.name = Some("other".into());
    in_ns2.create(&pp, &other).await.expect("a free name in an admitted namespace");
}

#[tokio::test]
async fn a_groups_status_is_the_operators_and_moves_by_one_with_the_site() {
    let env = setup("wh-status").await;
    let name = format!("{}-g", env.ns.name);
    create_group(
        &env.cluster,
        &group(&name, &env.ns.name, vec![site("iad", "192.0.2.1"), site("pdx", "192.0.2.2")], "iad"),
    )
    .await;
    let admin = env.cluster.groups();
    let operator_client = as_sa(&env, &env.op_ns.name, "bloodraven-operator").await;
    let operator = Api::<bloodraven_api::v1alpha1::MysqlFailoverGroup>::all(operator_client.clone());
    let pp = PatchParams::default();
    let status = |site: &str, generation: i64| {
        Patch::Merge(json!({"status": {"activeSite": site, "topologyGeneration": generation}}))
    };

    // The operator bootstraps; a cluster admin may not write status at all.
    operator.patch_status(&name, &pp, &status("iad", 1)).await.expect("the operator bootstraps at generation 1");
    let m = refusal(admin.patch_status(&name, &pp, &status("pdx", 2)).await);
    assert!(
        m.contains("written only by the operator")
            && m.contains("plannedFailover")
            && m.contains("revoke-deployment-leases"),
        "{m}"
    );
    let m = refusal(admin.patch_status(&name, &pp, &Patch::Merge(json!({"status": {"stable": false}}))).await);
    assert!(m.contains("written only by the operator"), "any status field: {m}");
    // Through the main resource the API server keeps the stored status.
    admin.patch(&name, &pp, &status("pdx", 9)).await.unwrap();
    let g = admin.get(&name).await.unwrap().status.unwrap();
    assert_eq!((g.active_site.as_deref(), g.topology_generation), (Some("iad"), Some(1)));

    // The operator itself: +1 with the site only, never down, never removed.
    for (patch, says) in [
        (status("iad", 2), "without a change of status.activeSite"),
        (status("pdx", 3), "never down"),
        (status("pdx", 1), "without a new topologyGeneration"),
        (Patch::Merge(json!({"status": {"topologyGeneration": null}})), "may not be removed"),
    ] {
        let m = refusal(operator.patch_status(&name, &pp, &patch).await);
        assert!(m.contains(says), "{says}: {m}");
    }
    operator.patch_status(&name, &pp, &status("pdx", 2)).await.expect("a move by +1 with the site");
    let m = refusal(operator.patch_status(&name, &pp, &status("iad", 1)).await);
    assert!(m.contains("never down"), "{m}");

    // A forged +1 made with the operator's own account, then the operator's
    // restore from its decision record: the one move down that passes, and
    // only to exactly what the record says.
    let uid = admin.get(&name).await.unwrap().metadata.uid.unwrap();
    let records = Api::<ConfigMap>::namespaced(operator_client.clone(), &env.op_ns.name);
    let record = |site: &str, generation: &str| ConfigMap {
        metadata: ObjectMeta { name: Some(bloodraven_api::names::state::record_name(&name)), ..ObjectMeta::default() },
        data: Some(
            [
                ("group", name.as_str()),
                ("groupUID", uid.as_str()),
                ("activeSite", site),
                ("topologyGeneration", generation),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ),
        ..ConfigMap::default()
    };
    records.create(&PostParams::default(), &record("pdx", "2")).await.expect("the operator writes its record");
    operator.patch_status(&name, &pp, &status("iad", 3)).await.expect("the forged +1");
    let m = refusal(operator.patch_status(&name, &pp, &status("iad", 2)).await);
    assert!(m.contains("without a new topologyGeneration") || m.contains("never down"), "not the record: {m}");
    let m = refusal(operator.patch_status(&name, &pp, &status("pdx", 1)).await);
    assert!(m.contains("never down"), "below the record: {m}");
    operator.patch_status(&name, &pp, &status("pdx", 2)).await.expect("the restore to the record passes");
    let g = admin.get(&name).await.unwrap().status.unwrap();
    assert_eq!((g.active_site.as_deref(), g.topology_generation), (Some("pdx"), Some(2)));
    // Only the operator: an admin's write of the same values is refused.
    let m = refusal(admin.patch_status(&name, &pp, &status("pdx", 2)).await);
    assert!(m.contains("written only by the operator"), "{m}");
    // Other status fields by the operator never reach the webhook and pass.
    operator.patch_status(&name, &pp, &Patch::Merge(json!({"status": {"stable": true}}))).await.unwrap();

    // History in the spec.
    let m = refusal(admin.patch(&name, &pp, &Patch::Merge(json!({"spec": {"initialActiveSite": "pdx"}}))).await);
    assert!(m.contains("after bootstrap") && m.contains("plannedFailover"), "{m}");
    admin
        .patch(
            &name,
            &pp,
            &Patch::Merge(json!({"spec": {"plannedFailover": {"targetSite": "iad", "requestId": "r1"}}})),
        )
        .await
        .expect("a planned failover request is an ordinary spec edit");
    assert!(env.webhook.reviews("groups", "denied").await >= 7, "{}", env.webhook.metrics().await);
}

/// The `-by` annotations name whoever set them, as the API server knows
/// them (what SelfSubjectReview answers, and what `kubectl bloodraven`
/// writes): an ordinary user, granted edits of groups by RBAC, may set them
/// to their own name only; an edit by someone else that leaves them as they
/// were, and their removal, pass.
#[tokio::test]
async fn a_by_annotation_names_only_the_user_who_set_it() {
    use bloodraven_api::names::{
        REVOKE_DEPLOYMENT_LEASES_ANNOTATION as REVOKE, REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION as REVOKE_BY,
        SCHEMA_VERIFIED_BY_ANNOTATION as VERIFIED_BY,
    };
    use bloodraven_api::v1alpha1::MysqlFailoverGroup;
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef};
    let env = setup("wh-by").await;
    let ns = env.ns.name.clone();
    let name = format!("{ns}-g");
    create_group(&env.cluster, &group(&name, &ns, vec![site("iad", "192.0.2.1"), site("pdx", "192.0.2.2")], "iad"))
        .await;
    // An on-call engineer: not an admin, may edit and create groups.
    let editor = as_sa(&env, &ns, "on-call").await;
    let meta = || ObjectMeta { name: Some(format!("{ns}-group-editor")), ..ObjectMeta::default() };
    let role = ClusterRole {
        metadata: meta(),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["bloodraven.shipstream.io".into()]),
            resources: Some(vec!["mysqlfailovergroups".into()]),
            verbs: ["get", "list", "create", "patch", "update", "delete"].map(str::to_owned).to_vec(),
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    };
    let binding = ClusterRoleBinding {
        metadata: meta(),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: format!("{ns}-group-editor"),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "on-call".into(),
            namespace: Some(ns.clone()),
            ..Subject::default()
        }]),
    };
    let pp = PostParams::default();
    Api::<ClusterRole>::all(env.cluster.client.clone()).create(&pp, &role).await.unwrap();
    Api::<ClusterRoleBinding>::all(env.cluster.client.clone()).create(&pp, &binding).await.unwrap();
    let me = Api::<SelfSubjectReview>::all(editor.clone())
        .create(&pp, &SelfSubjectReview::default())
        .await
        .unwrap()
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .expect("the API server names the user");
    assert_eq!(me, format!("system:serviceaccount:{ns}:on-call"));
    let groups = Api::<MysqlFailoverGroup>::all(editor);
    eventually("the on-call engineer may read groups", || groups.get(&name)).await;
    let admin = env.cluster.groups();
    let by = |key: &str, who: &str| {
        Patch::Merge(json!({"metadata": {"annotations": {VERIFIED_BY: null, REVOKE_BY: null, key: who}}}))
    };
    let annotation = |g: MysqlFailoverGroup, key: &str| g.metadata.annotations.unwrap_or_default().get(key).cloned();
    let mp = PatchParams::default();

    // Someone else's name: refused, saying whose name it may be and how.
    let m = refusal(groups.patch(&name, &mp, &by(VERIFIED_BY, "someone-else")).await);
    assert!(
        m.contains(VERIFIED_BY)
            && m.contains(&format!("\"{me}\""))
            && m.contains("\"someone-else\"")
            && m.contains("kubectl bloodraven verify-schema"),
        "{m}"
    );
    let m = refusal(groups.patch(&name, &mp, &by(REVOKE_BY, "someone-else")).await);
    assert!(m.contains(REVOKE_BY) && m.contains("kubectl bloodraven revoke"), "{m}");
    assert_eq!(annotation(admin.get(&name).await.unwrap(), VERIFIED_BY), None, "nothing was stored");
    // Their own name: admitted.
    let g = groups.patch(&name, &mp, &by(VERIFIED_BY, &me)).await.expect("one's own name");
    assert_eq!(annotation(g, VERIFIED_BY).as_deref(), Some(me.as_str()));
    // Someone else's later edit leaves it as it was: admitted. Changing it is not.
    admin
        .patch(&name, &mp, &Patch::Merge(json!({"metadata": {"labels": {"unrelated": "edit"}}})))
        .await
        .expect("an unrelated edit by another user, the annotation unchanged");
    let m = refusal(admin.patch(&name, &mp, &by(VERIFIED_BY, "someone-else")).await);
    assert!(m.contains(VERIFIED_BY), "a cluster admin names only themselves too: {m}");
    // Removal (what the operator does once it acted): admitted, by anyone.
    let g = admin
        .patch(&name, &mp, &Patch::Merge(json!({"metadata": {"annotations": {VERIFIED_BY: null}}})))
        .await
        .expect("a removal");
    assert_eq!(annotation(g, VERIFIED_BY), None);

    // A new group naming someone else is refused; naming oneself, created.
    let mut created = group(&format!("{name}-2"), &ns, vec![site("iad", "192.0.2.1"), site("pdx", "192.0.2.2")], "iad");
    created.metadata.annotations =
        Some([(REVOKE.to_owned(), "now".to_owned()), (REVOKE_BY.to_owned(), "someone-else".to_owned())].into());
    let m = refusal(groups.create(&pp, &created).await);
    assert!(m.contains(REVOKE_BY) && m.contains(&format!("\"{me}\"")), "{m}");
    created.metadata.annotations.as_mut().unwrap().insert(REVOKE_BY.to_owned(), me.clone());
    groups.create(&pp, &created).await.expect("a create naming oneself");
    assert!(env.webhook.reviews("groups", "denied").await >= 4, "{}", env.webhook.metrics().await);
    // One's own name, an unchanged annotation and a removal never reach the
    // webhook (its matchConditions): they pass while it is down.
    assert_eq!(env.webhook.reviews("groups", "allowed").await, 0, "{}", env.webhook.metrics().await);

    for g in [name.clone(), format!("{name}-2")] {
        env.cluster.delete_group(&g).await;
    }
    let _ = Api::<ClusterRoleBinding>::all(env.cluster.client.clone())
        .delete(&format!("{ns}-group-editor"), &DeleteParams::default())
        .await;
    let _ = Api::<ClusterRole>::all(env.cluster.client.clone())
        .delete(&format!("{ns}-group-editor"), &DeleteParams::default())
        .await;
}

#[tokio::test]
async fn the_operators_state_is_written_only_by_it_and_the_leader_lease_is_never_deleted() {
    let env = setup("wh-state").await;
    let op = env.op_ns.name.clone();
    let operator = as_sa(&env, &op, "bloodraven-operator").await;
    let admin = env.cluster.client.clone();
    let pp = PostParams::default();
    let lease =
        |name: &str| Lease { metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() }, spec: None };

    // The operator writes its deploy Leases; nobody else creates, edits or deletes them.
    let op_leases = Api::<Lease>::namespaced(operator.clone(), &op);
    let admin_leases = Api::<Lease>::namespaced(admin.clone(), &op);
    op_leases.create(&pp, &lease("bloodraven-deploy-abc-migration")).await.expect("the operator creates a slot");
    let m = refusal(admin_leases.create(&pp, &lease("bloodraven-tombstone-abc-def")).await);
    assert!(m.contains("revoke-deployment-leases"), "{m}");
    let generated = Lease {
        metadata: ObjectMeta { generate_name: Some("bloodraven-deploy-".into()), ..ObjectMeta::default() },
        spec: None,
    };
    refusal(admin_leases.create(&pp, &generated).await);
    let edit = Patch::Merge(json!({"spec": {"holderIdentity": "me"}}));
    let m = refusal(admin_leases.patch("bloodraven-deploy-abc-migration", &PatchParams::default(), &edit).await);
    assert!(m.contains("written only by it"), "{m}");
    refusal(admin_leases.delete("bloodraven-deploy-abc-migration", &DeleteParams::default()).await);
    op_leases.delete("bloodraven-deploy-abc-migration", &DeleteParams::default()).await.expect("the operator deletes");

    // Decision records and their key.
    let cm = |name: &str| ConfigMap {
        metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() },
        ..ConfigMap::default()
    };
    let m = refusal(
        Api::<ConfigMap>::namespaced(admin.clone(), &op).create(&pp, &cm("bloodraven-topology-0123456789abcdef")).await,
    );
    assert!(m.contains("planned failover"), "{m}");
    Api::<ConfigMap>::namespaced(operator.clone(), &op)
        .create(&pp, &cm("bloodraven-topology-0123456789abcdef"))
        .await
        .unwrap();
    let key = Secret {
        metadata: ObjectMeta { name: Some("bloodraven-record-key".into()), ..ObjectMeta::default() },
        ..Secret::default()
    };
    refusal(Api::<Secret>::namespaced(admin.clone(), &op).create(&pp, &key).await);
    // Other objects of the namespace, and the same names elsewhere, are not guarded.
    Api::<ConfigMap>::namespaced(admin.clone(), &op).create(&pp, &cm("app-config")).await.unwrap();
    Api::<Lease>::namespaced(admin.clone(), &env.ns.name).create(&pp, &lease("bloodraven-deploy-x")).await.unwrap();

    // The leader Lease: updated freely (leader election never waits on the webhook), deleted by nobody.
    op_leases.create(&pp, &lease("bloodraven-leader")).await.unwrap();
    admin_leases
        .patch("bloodraven-leader", &PatchParams::default(), &Patch::Merge(json!({"spec": {"holderIdentity": "x"}})))
        .await
        .expect("an update of the leader Lease is never sent to the webhook");
    for who in [&admin_leases, &op_leases] {
        let m = refusal(who.delete("bloodraven-leader", &DeleteParams::default()).await);
        assert!(m.contains("may not be deleted") && m.contains("delete the leading operator Pod"), "{m}");
    }
    // Found by an attack: a deletecollection reviews each object without request.name; it is
    // refused by the object's own name (not by a CEL error), and other objects go.
    let dry = DeleteParams { dry_run: true, ..DeleteParams::default() };
    let m = refusal(
        admin_leases.delete_collection(&dry, &ListParams::default().fields("metadata.name=bloodraven-leader")).await,
    );
    assert!(m.contains("delete the leading operator Pod"), "{m}");
    let admin_cms = Api::<ConfigMap>::namespaced(admin.clone(), &op);
    let m = refusal(
        admin_cms
            .delete_collection(
                &dry,
                &ListParams::default().fields("metadata.name=bloodraven-topology-0123456789abcdef"),
            )
            .await,
    );
    assert!(m.contains("planned failover"), "{m}");
    admin_cms
        .delete_collection(&dry, &ListParams::default().fields("metadata.name=app-config"))
        .await
        .expect("a deletecollection of other objects is not refused");
    assert!(env.webhook.reviews("operator-state", "denied").await >= 7, "{}", env.webhook.metrics().await);
}

/// The generation guard never locks the operator out of its own repair: a
/// +1 of `topologyGeneration` forged with the operator's own ServiceAccount
/// (the one move up the guard lets that account make) is undone by the
/// real operator from its decision record, through the real webhook, with
/// a `StatusRestored` Event. A trial saw the restore refused by the webhook
/// ("reconcile failed, Forbidden") until the webhook was down.
#[tokio::test]
async fn the_operator_restores_a_forged_generation_through_the_webhook() {
    use bloodraven_e2e::fixtures::{Scenario, is_ready_at, wait_event, wait_status};
    use bloodraven_e2e::operator::LeaderTimings;
    use bloodraven_e2e::webhook::{Options, Webhook};
    use std::time::Duration;
    let sc = Scenario::start("wh-restore", 1, LeaderTimings::default()).await;
    let name = sc.quick_group("g").await;
    let webhook = Webhook::start(&sc.cluster, &sc.ns, Options::default()).await;
    webhook.register(&sc.cluster, &webhook.params(&sc.ns.name, &[], &sc.ns.name)).await;
    let pp = PatchParams::default();
    let forged = Patch::Merge(json!({"status": {"activeSite": "pdx", "topologyGeneration": 2}}));
    // The webhook guards the group: an administrator may not write status.
    let m = refusal(sc.cluster.groups().patch_status(&name, &pp, &forged).await);
    assert!(m.contains("written only by the operator"), "{m}");

    let operator_client =
        sc.cluster.client_with_token(&token(&sc.cluster, &sc.ns.name, "bloodraven-operator", &[]).await).await;
    let operator = Api::<bloodraven_api::v1alpha1::MysqlFailoverGroup>::all(operator_client);
    operator
        .patch_status(&name, &pp, &forged)
        .await
        .expect("the guard lets the operator's account move +1 with the site");
    let note = wait_event(&sc.cluster, &name, "StatusRestored").await;
    assert!(note.contains("restored activeSite=iad, topologyGeneration=1"), "{note}");
    let s = wait_status(
        &sc.cluster,
        &name,
        "iad, generation 1, restored through the webhook",
        Duration::from_secs(60),
        |s| is_ready_at(s, "iad", 1),
    )
    .await;
    assert_eq!((s.active_site.as_deref(), s.topology_generation), (Some("iad"), Some(1)));
    // Nothing was refused on the way: the operator's log has no Forbidden reconcile.
    let log = sc.operators[0].log();
    assert!(!log.contains("Forbidden"), "the operator was refused: {}", sc.operators[0].log_tail());
    sc.cluster.delete_group(&name).await;
    webhook.unregister(&sc.cluster).await;
}
