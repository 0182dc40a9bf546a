//! The webhook's registration with the API server: one
//! ValidatingWebhookConfiguration and one MutatingWebhookConfiguration,
//! built here once for the chart's template check, the playground
//! (`bloodraven-webhook configurations`) and the e2e tests.
//!
//! Scope, so that the webhook sits in front of as little as possible and
//! never in front of leader election:
//! - `matchConditions` (CEL, evaluated in the API server) send a request only
//!   when it touches what a guard protects: a change of `deploymentClients`;
//!   a status write by someone other than the operator; a generation change
//!   by the operator; a history change of a group's spec, or a `-by`
//!   annotation set to another name than the requester's; a write of an
//!   operator state object by someone other than the operator; a delete of
//!   the leader Lease; an annotated Job. Everything else — Lease *updates*
//!   of leader election, the operator's deploy-Lease renewals, every other
//!   Pod and Job — never reaches the webhook and cannot wait on it.
//! - `namespaceSelector` leaves out kube-system and kube-node-lease (and,
//!   for injection, the webhook's own namespace).
//! - Guards of the fence fail closed (`failurePolicy: Fail`); the check of
//!   the operator's own generation moves fails open, so an outage of the
//!   webhook never holds up a failover (the operator cannot be locked out
//!   of recording a promotion by the webhook it does not depend on).

use bloodraven_api::names::{self, inject as inj, state};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};

/// Where the API server reaches the webhook.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// A URL (`https://host:port`): the paths are appended.
    Url(String),
    /// A Service `namespace/name` on [`names::WEBHOOK_PORT`].
    Service {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

/// What a registration is built from.
#[derive(Clone, Debug)]
pub struct Params {
    /// Name of both configurations (`bloodraven` in the chart).
    pub name: String,
    /// Where the webhook is.
    pub endpoint: Endpoint,
    /// The CA bundle (PEM) the webhook's certificate chains to.
    pub ca_bundle: Vec<u8>,
    /// The operator's (and webhook's) namespace.
    pub namespace: String,
    /// The operator's ServiceAccount username (`system:serviceaccount:NS:NAME`).
    pub operator: String,
    /// Users whose deletes of operator state pass (namespace controller, garbage collector).
    pub trusted_deleters: Vec<String>,
    /// Seconds the API server waits for an answer ([1, 30]).
    pub timeout_seconds: i32,
    /// Extra requirements on namespaced objects' namespaces (tests scope a
    /// registration to their own namespaces with it).
    pub namespace_requirements: Vec<LabelSelectorRequirement>,
    /// Extra requirements on MysqlFailoverGroups' labels (groups are
    /// cluster-scoped: the namespace selector does not apply to them).
    pub group_requirements: Vec<LabelSelectorRequirement>,
}

/// The URL path of each guard.
pub mod paths {
    /// `deploymentClients`.
    pub const DATABASES: &str = "/validate/mysqldatabases";
    /// A new MysqlDatabase's claim.
    pub const CLAIMS: &str = "/validate/mysqldatabase-claims";
    /// Group status, spec and the `-by` annotations.
    pub const GROUPS: &str = "/validate/mysqlfailovergroups";
    /// The operator's state objects.
    pub const STATE: &str = "/validate/operator-state";
    /// Sidecar injection into Jobs.
    pub const JOBS: &str = "/mutate/jobs";
}

/// CEL: the name of the object a request is about. Never `request.name`
/// alone: a deletecollection sends each object's DELETE with an empty name
/// (absent in CEL, so an error), and a create may carry only a
/// `generateName` (which counts as the name: a prefix cannot be slipped
/// past a guard). The webhook reads it the same way ([`crate::review`]).
pub const OBJECT_NAME: &str = "(request.operation == 'DELETE' ? (has(oldObject.metadata.name) ? oldObject.metadata.name : '') : has(object.metadata.name) && object.metadata.name != '' ? object.metadata.name : has(object.metadata.generateName) ? object.metadata.generateName : '')";

fn client(p: &Params, path: &str) -> WebhookClientConfig {
    let ca_bundle = Some(ByteString(p.ca_bundle.clone()));
    match &p.endpoint {
        Endpoint::Url(base) => {
            WebhookClientConfig { url: Some(format!("{}{path}", base.trim_end_matches('/'))), ca_bundle, service: None }
        }
        Endpoint::Service { namespace, name } => WebhookClientConfig {
            url: None,
            ca_bundle,
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(path.to_owned()),
                port: Some(i32::from(names::WEBHOOK_PORT)),
            }),
        },
    }
}

fn rule(group: &str, resources: &[&str], operations: &[&str], scope: &str) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(vec![group.to_owned()]),
        api_versions: Some(vec!["*".to_owned()]),
        resources: Some(resources.iter().map(|s| (*s).to_owned()).collect()),
        operations: Some(operations.iter().map(|s| (*s).to_owned()).collect()),
        scope: Some(scope.to_owned()),
    }
}

fn cond(name: &str, expression: String) -> MatchCondition {
    MatchCondition { name: name.to_owned(), expression }
}

fn quoted(s: &str) -> String {
    // CEL string literal; names here are DNS names and usernames (no quotes or backslashes).
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn list(items: &[String]) -> String {
    format!("[{}]", items.iter().map(|s| quoted(s)).collect::<Vec<_>>().join(", "))
}

fn not_system_namespaces(p: &Params, also: &[&str]) -> LabelSelector {
    let mut excluded = vec!["kube-system".to_owned(), "kube-node-lease".to_owned()];
    excluded.extend(also.iter().map(|s| (*s).to_owned()));
    let mut reqs = vec![LabelSelectorRequirement {
        key: "kubernetes.io/metadata.name".into(),
        operator: "NotIn".into(),
        values: Some(excluded),
    }];
    reqs.extend(p.namespace_requirements.iter().cloned());
    LabelSelector { match_expressions: Some(reqs), match_labels: None }
}

fn groups_selector(p: &Params) -> Option<LabelSelector> {
    (!p.group_requirements.is_empty())
        .then(|| LabelSelector { match_expressions: Some(p.group_requirements.clone()), match_labels: None })
}

/// `has(o.a) ? o.a : default`, for a dotted field of a CEL object variable.
fn field_or(var: &str, path: &[&str], default: &str) -> String {
    let mut guards = Vec::new();
    let mut at = var.to_owned();
    for part in path {
        guards.push(format!("has({at}.{part})"));
        at = format!("{at}.{part}");
    }
    format!("({} ? {at} : {default})", guards.join(" && "))
}

fn validating(
    p: &Params,
    name: &str,
    path: &str,
    rules: Vec<RuleWithOperations>,
    conditions: Vec<MatchCondition>,
    fail: bool,
) -> ValidatingWebhook {
    ValidatingWebhook {
        name: format!("{name}.bloodraven.shipstream.io"),
        admission_review_versions: vec!["v1".into()],
        client_config: client(p, path),
        failure_policy: Some(if fail { "Fail" } else { "Ignore" }.into()),
        match_policy: Some("Equivalent".into()),
        side_effects: "None".into(),
        timeout_seconds: Some(p.timeout_seconds),
        rules: Some(rules),
        match_conditions: Some(conditions),
        namespace_selector: None,
        object_selector: None,
    }
}

/// The ValidatingWebhookConfiguration (see the module header for its scope).
#[allow(clippy::too_many_lines)] // one webhook after the other, each with its reasons
pub fn validating_configuration(p: &Params) -> ValidatingWebhookConfiguration {
    let user = "request.userInfo.username";
    let operator = quoted(&p.operator);
    let trusted = list(&p.trusted_deleters);
    let mut webhooks = Vec::new();

    // deploymentClients: a create or delete with entries, an update that changes them.
    let clients = |v: &str| field_or(v, &["spec", "deploymentClients"], "[]");
    let mut db = validating(
        p,
        "deployment-clients",
        paths::DATABASES,
        vec![rule(names::GROUP, &["mysqldatabases"], &["CREATE", "UPDATE", "DELETE"], "Namespaced")],
        vec![
            cond("not-a-trusted-deleter", format!("!(request.operation == 'DELETE' && {user} in {trusted})")),
            cond(
                "clients-touched",
                format!(
                    "request.operation == 'CREATE' ? size({c_new}) > 0 : request.operation == 'DELETE' ? size({c_old}) > 0 : {c_new} != {c_old} || (size({c_old}) > 0 && {o_new} != {o_old})",
                    c_new = clients("object"),
                    c_old = clients("oldObject"),
                    o_new = field_or("object", &["metadata", "ownerReferences"], "[]"),
                    o_old = field_or("oldObject", &["metadata", "ownerReferences"], "[]"),
                ),
            ),
        ],
        true,
    );
    db.namespace_selector = Some(not_system_namespaces(p, &[]));
    webhooks.push(db);

    // Every create of a MysqlDatabase: refused when its group will refuse
    // the claim (the operator's reason, at create time). Fails open: the
    // operator stays the authority and says the same on the object.
    let mut claims = validating(
        p,
        "database-claim",
        paths::CLAIMS,
        vec![rule(names::GROUP, &["mysqldatabases"], &["CREATE"], "Namespaced")],
        Vec::new(),
        false,
    );
    claims.namespace_selector = Some(not_system_namespaces(p, &[]));
    webhooks.push(claims);

    // Group status by anyone but the operator (through /status; through the
    // main resource the API server keeps the stored status).
    let mut status = validating(
        p,
        "group-status",
        paths::GROUPS,
        vec![rule(names::GROUP, &["mysqlfailovergroups/status"], &["UPDATE"], "Cluster")],
        vec![cond("not-the-operator", format!("{user} != {operator}"))],
        true,
    );
    status.object_selector = groups_selector(p);
    webhooks.push(status);

    // The operator's own moves of the fence: checked, failing open.
    let generation = |v: &str| field_or(v, &["status", "topologyGeneration"], "0");
    let site = |v: &str| field_or(v, &["status", "activeSite"], "''");
    let mut own = validating(
        p,
        "group-generation",
        paths::GROUPS,
        vec![rule(names::GROUP, &["mysqlfailovergroups/status"], &["UPDATE"], "Cluster")],
        vec![
            cond("the-operator", format!("{user} == {operator}")),
            cond(
                "fence-moves",
                format!(
                    "{} != {} || {} != {}",
                    generation("object"),
                    generation("oldObject"),
                    site("object"),
                    site("oldObject")
                ),
            ),
        ],
        false,
    );
    own.object_selector = groups_selector(p);
    webhooks.push(own);

    // Group spec: history; and the `-by` annotations, set (by a create or
    // an update) to anything but the requesting user's own name. Writing
    // your own name never reaches the webhook: `kubectl bloodraven revoke`
    // works while the webhook is down.
    let initial = |v: &str| field_or(v, &["spec", "initialActiveSite"], "''");
    let sites = |v: &str| format!("{}.map(s, has(s.name) ? s.name : '')", field_or(v, &["spec", "sites"], "[]"));
    let history =
        format!("{} != {} || {} != {}", initial("object"), initial("oldObject"), sites("object"), sites("oldObject"));
    // The annotation as a list of zero or one value: absent and empty differ.
    let by = |v: &str, key: &str| {
        format!(
            "((has({v}.metadata.annotations) && {k} in {v}.metadata.annotations) ? [{v}.metadata.annotations[{k}]] : [])",
            k = quoted(key)
        )
    };
    // (-by, the request it vouches for): a -by of another name, set by this
    // write or left standing beside a request this write changes.
    let keys = [
        (names::REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION, names::REVOKE_DEPLOYMENT_LEASES_ANNOTATION),
        (names::SCHEMA_VERIFIED_BY_ANNOTATION, names::SCHEMA_VERIFIED_ANNOTATION),
    ];
    let by_other = |old: bool| {
        keys.iter()
            .map(|(k, main)| {
                let now = by("object", k);
                let was = if old {
                    let request = by("object", main);
                    format!(
                        " && ({now} != {} || ({request} != [] && {request} != {}))",
                        by("oldObject", k),
                        by("oldObject", main)
                    )
                } else {
                    String::new()
                };
                format!("({now} != [] && {now} != [{user}]{was})")
            })
            .collect::<Vec<_>>()
            .join(" || ")
    };
    let mut spec = validating(
        p,
        "group-history",
        paths::GROUPS,
        vec![rule(names::GROUP, &["mysqlfailovergroups"], &["CREATE", "UPDATE"], "Cluster")],
        vec![cond(
            "history-or-requester-touched",
            // oldObject is null on a create: read only on an update.
            format!("request.operation == 'CREATE' ? ({}) : ({history} || {})", by_other(false), by_other(true)),
        )],
        true,
    );
    spec.object_selector = groups_selector(p);
    webhooks.push(spec);

    // Operator state: writes by anyone but the operator, deletes by anyone
    // but the operator and the trusted deleters; matched by name (and
    // generateName), per resource.
    let name = OBJECT_NAME;
    let prefixes =
        |ps: &[&str]| ps.iter().map(|x| format!("{name}.startsWith({})", quoted(x))).collect::<Vec<_>>().join(" || ");
    let names_match = format!(
        "(request.resource.resource == 'leases' && ({})) || (request.resource.resource == 'configmaps' && ({})) || (request.resource.resource == 'secrets' && {name} in {})",
        prefixes(&state::LEASE_PREFIXES),
        prefixes(&state::CONFIGMAP_PREFIXES),
        list(&state::SECRET_NAMES.map(str::to_owned)),
    );
    let mut st = validating(
        p,
        "operator-state",
        paths::STATE,
        vec![
            rule("coordination.k8s.io", &["leases"], &["CREATE", "UPDATE", "DELETE"], "Namespaced"),
            rule("", &["configmaps", "secrets"], &["CREATE", "UPDATE", "DELETE"], "Namespaced"),
        ],
        vec![
            cond("not-the-operator", format!("{user} != {operator}")),
            cond("not-a-trusted-deleter", format!("!(request.operation == 'DELETE' && {user} in {trusted})")),
            cond("operator-state", names_match),
        ],
        true,
    );
    st.namespace_selector = Some(own_namespace(p));
    webhooks.push(st);

    // The leader Lease: deletes only, by anyone but the trusted deleters.
    let mut leader = validating(
        p,
        "leader-lease",
        paths::STATE,
        vec![rule("coordination.k8s.io", &["leases"], &["DELETE"], "Namespaced")],
        vec![
            cond("the-leader-lease", format!("{OBJECT_NAME} == {}", quoted(names::LEADER_LEASE_NAME))),
            cond(
                "not-the-namespace-controller",
                format!("{user} != {}", quoted(crate::guards::state::NAMESPACE_CONTROLLER)),
            ),
        ],
        true,
    );
    leader.namespace_selector = Some(own_namespace(p));
    webhooks.push(leader);

    ValidatingWebhookConfiguration {
        metadata: ObjectMeta { name: Some(p.name.clone()), labels: Some(labels()), ..ObjectMeta::default() },
        webhooks: Some(webhooks),
    }
}

fn own_namespace(p: &Params) -> LabelSelector {
    let mut reqs = vec![LabelSelectorRequirement {
        key: "kubernetes.io/metadata.name".into(),
        operator: "In".into(),
        values: Some(vec![p.namespace.clone()]),
    }];
    reqs.extend(p.namespace_requirements.iter().cloned());
    LabelSelector { match_expressions: Some(reqs), match_labels: None }
}

fn labels() -> std::collections::BTreeMap<String, String> {
    [("app.kubernetes.io/name".to_owned(), "bloodraven-webhook".to_owned())].into()
}

/// The MutatingWebhookConfiguration: injection into annotated Jobs.
pub fn mutating_configuration(p: &Params) -> MutatingWebhookConfiguration {
    let asks = |v: &str| {
        format!(
            "(has({v}.metadata.annotations) && {key} in {v}.metadata.annotations && {v}.metadata.annotations[{key}] == 'true')",
            key = quoted(inj::INJECT)
        )
    };
    let template = format!(
        "(has(object.spec.template.metadata) && has(object.spec.template.metadata.annotations) && {key} in object.spec.template.metadata.annotations && object.spec.template.metadata.annotations[{key}] == 'true')",
        key = quoted(inj::INJECT)
    );
    // A create that asks (on the Job, or by mistake on its Pod template:
    // refused, not run unfenced); an update that adds the annotation
    // (refused: the template is immutable). Other updates never match, so
    // the Job controller's writes never wait on the webhook.
    let annotated = format!(
        "request.operation == 'CREATE' ? ({new} || {template}) : ({new} && !{old})",
        new = asks("object"),
        old = asks("oldObject"),
    );
    let webhook = MutatingWebhook {
        name: "inject.bloodraven.shipstream.io".into(),
        admission_review_versions: vec!["v1".into()],
        client_config: client(p, paths::JOBS),
        failure_policy: Some("Fail".into()),
        match_policy: Some("Equivalent".into()),
        side_effects: "None".into(),
        timeout_seconds: Some(p.timeout_seconds),
        reinvocation_policy: Some("IfNeeded".into()),
        rules: Some(vec![rule("batch", &["jobs"], &["CREATE", "UPDATE"], "Namespaced")]),
        match_conditions: Some(vec![cond("annotated", annotated)]),
        namespace_selector: Some(not_system_namespaces(p, &[p.namespace.as_str()])),
        object_selector: None,
    };
    MutatingWebhookConfiguration {
        metadata: ObjectMeta { name: Some(p.name.clone()), labels: Some(labels()), ..ObjectMeta::default() },
        webhooks: Some(vec![webhook]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            name: "bloodraven".into(),
            endpoint: Endpoint::Service { namespace: "bloodraven".into(), name: "bloodraven-webhook".into() },
            ca_bundle: b"PEM".to_vec(),
            namespace: "bloodraven".into(),
            operator: "system:serviceaccount:bloodraven:bloodraven-operator".into(),
            trusted_deleters: vec!["system:serviceaccount:kube-system:namespace-controller".into()],
            timeout_seconds: 5,
            namespace_requirements: Vec::new(),
            group_requirements: Vec::new(),
        }
    }

    #[test]
    fn no_guard_is_sent_lease_updates_of_leader_election_or_the_operators_writes() {
        let v = validating_configuration(&params());
        for w in v.webhooks.as_ref().unwrap() {
            let rules = w.rules.as_ref().unwrap();
            let leases_update = rules.iter().any(|r| {
                r.resources.as_ref().unwrap().contains(&"leases".into())
                    && r.operations.as_ref().unwrap().contains(&"UPDATE".into())
            });
            let conditions: String =
                w.match_conditions.as_ref().unwrap().iter().map(|c| c.expression.clone()).collect();
            if leases_update {
                // Only other users' writes of the named prefixes; the leader Lease matches none.
                assert!(conditions.contains("!= 'system:serviceaccount:bloodraven:bloodraven-operator'"), "{}", w.name);
                assert!(!conditions.contains("bloodraven-leader"), "{}", w.name);
            }
            // Fail open only where the operator decides anyway: the
            // generation check of its own writes, and the early claim refusal.
            let open = w.name.starts_with("group-generation") || w.name.starts_with("database-claim");
            assert_eq!(w.failure_policy.as_deref(), Some(if open { "Ignore" } else { "Fail" }), "{}", w.name);
        }
        let m = mutating_configuration(&params());
        let w = &m.webhooks.as_ref().unwrap()[0];
        assert_eq!(w.reinvocation_policy.as_deref(), Some("IfNeeded"));
        let ns = w.namespace_selector.as_ref().unwrap().match_expressions.as_ref().unwrap();
        assert_eq!(ns[0].values.as_ref().unwrap(), &["kube-system", "kube-node-lease", "bloodraven"]);
    }

    /// A create has no oldObject (null in CEL: reading it is an error, and
    /// an error fails the request closed), so only an update reads it.
    #[test]
    fn group_history_sees_creates_and_reads_the_old_object_only_on_updates() {
        let v = validating_configuration(&params());
        let w = v.webhooks.unwrap().into_iter().find(|w| w.name.starts_with("group-history")).unwrap();
        assert_eq!(w.rules.unwrap()[0].operations.as_deref().unwrap(), ["CREATE", "UPDATE"]);
        let conditions = w.match_conditions.unwrap();
        assert_eq!(conditions.len(), 1);
        let e = &conditions[0].expression;
        let (on_create, on_update) = e
            .strip_prefix("request.operation == 'CREATE' ? (")
            .and_then(|rest| rest.split_once(") : ("))
            .unwrap_or_else(|| panic!("{e}"));
        assert!(!on_create.contains("oldObject"), "{on_create}");
        for key in [names::REVOKE_DEPLOYMENT_LEASES_BY_ANNOTATION, names::SCHEMA_VERIFIED_BY_ANNOTATION] {
            for side in [on_create, on_update] {
                assert!(side.contains(&format!("'{key}'")), "{key}: {side}");
                assert!(side.contains("!= [request.userInfo.username]"), "{side}");
            }
        }
        assert!(on_update.contains("initialActiveSite") && on_update.contains("oldObject"), "{on_update}");
    }

    #[test]
    fn a_url_endpoint_gets_each_path() {
        let mut p = params();
        p.endpoint = Endpoint::Url("https://127.0.0.1:9443/".into());
        let m = mutating_configuration(&p);
        assert_eq!(m.webhooks.unwrap()[0].client_config.url.as_deref(), Some("https://127.0.0.1:9443/mutate/jobs"));
    }
}
