//! The admission endpoints: an `AdmissionReview` (`admission.k8s.io/v1`) in,
//! one out. Bad input answers HTTP 400 with the reason (the API server then
//! applies the webhook's failure policy); a body over [`MAX_REVIEW_BYTES`]
//! 413; a body not sent within the body timeout 408. Every review is
//! answered within the API server's own `?timeout=` (less a margin): work
//! that would run past it (a SubjectAccessReview) ends in a refusal that
//! says so, rather than in the API server's generic timeout.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bloodraven_api::names;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::Value;

use bloodraven_serving::body::BodyError;

use crate::guards::{database, group, state};
use crate::{Webhook, inject};

/// Largest review accepted: two objects of etcd's 1.5 MiB limit, with room.
pub const MAX_REVIEW_BYTES: usize = 4 * 1024 * 1024;

/// What the webhook keeps of the API server's timeout for writing its answer.
const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// The API server's default webhook timeout, when a request names none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// A guard's verdict.
#[derive(Debug)]
pub enum Verdict {
    /// Allowed as is.
    Allow,
    /// Refused, with the message the user sees.
    Deny(String),
    /// Allowed with these changes (injection).
    Patch(json_patch::Patch),
}

/// Which endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `deploymentClients`.
    Databases,
    /// A new MysqlDatabase's claim on its group.
    Claims,
    /// Group status, history and the `-by` annotations.
    Groups,
    /// Operator state.
    State,
    /// Job injection.
    Jobs,
}

impl Endpoint {
    /// Its label in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Databases => "deployment-clients",
            Endpoint::Claims => "database-claim",
            Endpoint::Groups => "groups",
            Endpoint::State => "operator-state",
            Endpoint::Jobs => "inject",
        }
    }
}

/// Parses the API server's `timeout` query value (`10s`, `1500ms`, `1m`).
pub fn parse_timeout(value: &str) -> Option<Duration> {
    let (digits, unit) = value.split_at(value.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = digits.parse().ok()?;
    match unit {
        "s" => Some(Duration::from_secs(n)),
        "ms" => Some(Duration::from_millis(n)),
        "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
        _ => None,
    }
}

fn bad(status: StatusCode, message: String) -> Response {
    (status, message).into_response()
}

/// The handler of every endpoint.
#[allow(clippy::implicit_hasher)] // axum's Query extractor fills a std HashMap
pub async fn handle(
    endpoint: Endpoint,
    State(w): State<Arc<Webhook>>,
    Query(query): Query<HashMap<String, String>>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let budget = query.get("timeout").and_then(|t| parse_timeout(t)).unwrap_or(DEFAULT_TIMEOUT);
    let budget = budget.saturating_sub(ANSWER_MARGIN).max(Duration::from_millis(100));
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let read =
        bloodraven_serving::body::read(body, declared, MAX_REVIEW_BYTES, bloodraven_serving::limits::BODY_TIMEOUT);
    let bytes = match read.await {
        Err(BodyError::Timeout) => return bad(StatusCode::REQUEST_TIMEOUT, "the review was not sent in time".into()),
        Err(BodyError::TooLarge) => {
            return bad(StatusCode::PAYLOAD_TOO_LARGE, format!("a review is at most {MAX_REVIEW_BYTES} bytes"));
        }
        Err(BodyError::Failed) => return bad(StatusCode::BAD_REQUEST, "the review could not be read".into()),
        Ok(b) => b,
    };
    let value: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => return bad(StatusCode::BAD_REQUEST, format!("not an admission.k8s.io/v1 AdmissionReview: {e}")),
    };
    if let Err(e) = check_envelope(endpoint, &value) {
        return bad(StatusCode::BAD_REQUEST, e);
    }
    let review: AdmissionReview<DynamicObject> = match serde_json::from_value(value) {
        Ok(r) => r,
        Err(e) => return bad(StatusCode::BAD_REQUEST, format!("not an admission.k8s.io/v1 AdmissionReview: {e}")),
    };
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(_) => return bad(StatusCode::BAD_REQUEST, "the AdmissionReview has no request".into()),
    };
    let verdict = if w.noop {
        match (&w.noop_patch, endpoint) {
            (Some(patch), Endpoint::Jobs) => Verdict::Patch(patch.clone()),
            _ => Verdict::Allow,
        }
    } else {
        match tokio::time::timeout(budget, decide(&w, endpoint, &request)).await {
            Ok(v) => v,
            Err(_) => Verdict::Deny(format!(
                "the Bloodraven webhook could not finish its checks within the API server's timeout ({} ms); nothing was changed, try again",
                budget.as_millis()
            )),
        }
    };
    let outcome = match &verdict {
        Verdict::Allow => "allowed",
        Verdict::Deny(_) => "denied",
        Verdict::Patch(p) if p.0.is_empty() => "allowed",
        Verdict::Patch(_) => "patched",
    };
    w.metrics.observe(endpoint.as_str(), outcome, started.elapsed());
    let mut response = AdmissionResponse::from(&request);
    match verdict {
        Verdict::Allow => {}
        Verdict::Deny(message) => {
            tracing::info!(
                webhook = endpoint.as_str(),
                user = %bloodraven_serving::log::escape(request.user_info.username.as_deref().unwrap_or(""), 200),
                resource = %request.resource.resource,
                namespace = request.namespace.as_deref().unwrap_or(""),
                name = %request.name,
                reason = %message,
                "refused"
            );
            response = response.deny(message);
            response.result.code = 403;
            response.result.reason = "Forbidden".into();
        }
        Verdict::Patch(patch) if patch.0.is_empty() => {}
        Verdict::Patch(patch) => match response.with_patch(patch) {
            Ok(r) => response = r,
            Err(e) => return bad(StatusCode::INTERNAL_SERVER_ERROR, format!("failed to encode the patch: {e}")),
        },
    }
    match encode(&response.into_review()) {
        Ok(review) => Json(review).into_response(),
        Err(e) => bad(StatusCode::INTERNAL_SERVER_ERROR, format!("failed to encode the review: {e}")),
    }
}

/// What `endpoint` is registered for: `(API group, resource, kind)` and operations.
fn registered(endpoint: Endpoint) -> (&'static [(&'static str, &'static str, &'static str)], &'static [&'static str]) {
    match endpoint {
        Endpoint::Databases => (&[(names::GROUP, "mysqldatabases", "MysqlDatabase")], &["CREATE", "UPDATE", "DELETE"]),
        Endpoint::Claims => (&[(names::GROUP, "mysqldatabases", "MysqlDatabase")], &["CREATE"]),
        Endpoint::Groups => (&[(names::GROUP, "mysqlfailovergroups", "MysqlFailoverGroup")], &["CREATE", "UPDATE"]),
        Endpoint::State => (
            &[("coordination.k8s.io", "leases", "Lease"), ("", "configmaps", "ConfigMap"), ("", "secrets", "Secret")],
            &["CREATE", "UPDATE", "DELETE"],
        ),
        Endpoint::Jobs => (&[("batch", "jobs", "Job")], &["CREATE", "UPDATE"]),
    }
}

/// Checks that `review` is one the API server sends `endpoint`: an
/// `admission.k8s.io/v1` `AdmissionReview` with a request, for a resource
/// and an operation the endpoint is registered for, carrying the objects
/// that operation has (CREATE the object, UPDATE both, DELETE the old one),
/// each of the resource's kind. Every guard reads a missing object as
/// "nothing to check": without this, garbage (found by an attack: an UPDATE
/// without `oldObject`, a Pod sent as a Job, a review of the wrong
/// resource) was answered "allowed". Errors: what is wrong, for a 400.
pub fn check_envelope(endpoint: Endpoint, review: &Value) -> Result<(), String> {
    let text = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let api_version = text(review, "/apiVersion").unwrap_or_default();
    let kind = text(review, "/kind").unwrap_or_default();
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(format!(
            "not an admission.k8s.io/v1 AdmissionReview (apiVersion {:?}, kind {:?})",
            truncated(&api_version),
            truncated(&kind)
        ));
    }
    let Some(request) = review.get("request").filter(|r| r.is_object()) else {
        return Err("the AdmissionReview has no request".into());
    };
    if text(request, "/uid").is_none_or(|u| u.is_empty()) {
        return Err("the AdmissionReview's request has no uid".into());
    }
    let (resources, operations) = registered(endpoint);
    let group = text(request, "/resource/group").unwrap_or_default();
    let resource = text(request, "/resource/resource").unwrap_or_default();
    let Some(&(_, _, kind)) = resources.iter().find(|(g, r, _)| *g == group && *r == resource) else {
        return Err(format!(
            "endpoint {} does not review resource {:?} of API group {:?}",
            endpoint.as_str(),
            truncated(&resource),
            truncated(&group)
        ));
    };
    if text(request, "/kind/kind").as_deref() != Some(kind)
        || text(request, "/kind/group").as_deref() != Some(group.as_str())
    {
        return Err(format!("request.kind is not {kind} of API group {group:?}"));
    }
    let operation = text(request, "/operation").unwrap_or_default();
    if !operations.contains(&operation.as_str()) {
        return Err(format!("endpoint {} does not review {:?}", endpoint.as_str(), truncated(&operation)));
    }
    let present = |field: &str| request.get(field).is_some_and(|o| !o.is_null());
    let (new, old) = match operation.as_str() {
        "CREATE" => (true, false),
        "UPDATE" => (true, true),
        _ => (false, true),
    };
    for (field, needed) in [("object", new), ("oldObject", old)] {
        if needed && !present(field) {
            return Err(format!("a {operation} review needs request.{field}"));
        }
        if present(field) {
            let object = &request[field];
            if !object.is_object() || text(object, "/kind").as_deref() != Some(kind) {
                return Err(format!("request.{field} is not a {kind}"));
            }
            let version = text(object, "/apiVersion").unwrap_or_default();
            let object_group = version.rsplit_once('/').map_or("", |(g, _)| g);
            if object_group != group {
                return Err(format!("request.{field} is not a {kind} of API group {group:?}"));
            }
        }
    }
    Ok(())
}

fn truncated(s: &str) -> String {
    s.chars().take(80).collect()
}

/// The review as the API server reads it: kube-core serializes
/// `response.patch` (Go `[]byte`) as an array of numbers, which Go decodes
/// but at four times the size and one reflected element at a time; the
/// wire form is a base64 string.
fn encode(review: &AdmissionReview<DynamicObject>) -> Result<Value, serde_json::Error> {
    use base64::Engine as _;
    let mut value = serde_json::to_value(review)?;
    if let Some(patch) = value.pointer_mut("/response/patch")
        && let Some(bytes) =
            patch.as_array().map(|a| a.iter().filter_map(Value::as_u64).map(|b| b as u8).collect::<Vec<u8>>())
    {
        *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    Ok(value)
}

/// The name of the object a request is about, as
/// [`crate::registration::OBJECT_NAME`] reads it: a delete's old object's
/// (a deletecollection sends an empty `request.name`), else the object's
/// name, else its `generateName`.
pub fn object_name(request: &AdmissionRequest<DynamicObject>, old: Option<&Value>, new: Option<&Value>) -> String {
    let field = |o: Option<&Value>, f: &str| {
        o.and_then(|o| o.pointer(&format!("/metadata/{f}")))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
    };
    let found = if matches!(request.operation, Operation::Delete) {
        field(old, "name")
    } else {
        field(new, "name").or_else(|| field(new, "generateName"))
    };
    found.unwrap_or_else(|| request.name.clone())
}

/// The data of the decision record of the group `object` names, from the
/// operator's namespace (`None`: no such record). Read live, never cached:
/// it is consulted only for a status write the rules refuse.
async fn decision_record(
    w: &Webhook,
    object: &Value,
) -> Result<Option<std::collections::BTreeMap<String, String>>, String> {
    let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str) else { return Ok(None) };
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(w.authority.client().clone(), &w.namespace);
    let read = tokio::time::timeout(RECORD_READ_TIMEOUT, api.get_opt(&names::state::record_name(name))).await;
    match read {
        Ok(Ok(cm)) => Ok(cm.map(|cm| cm.data.unwrap_or_default())),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} s", RECORD_READ_TIMEOUT.as_secs())),
    }
}

/// How long a status review waits for the decision record: well inside the
/// API server's webhook timeout.
const RECORD_READ_TIMEOUT: Duration = Duration::from_secs(3);

fn username(request: &AdmissionRequest<DynamicObject>) -> &str {
    request.user_info.username.as_deref().unwrap_or_default()
}

fn as_json(object: Option<&DynamicObject>) -> Option<Value> {
    object.and_then(|o| serde_json::to_value(o).ok())
}

async fn decide(w: &Webhook, endpoint: Endpoint, request: &AdmissionRequest<DynamicObject>) -> Verdict {
    let new = as_json(request.object.as_ref());
    let old = as_json(request.old_object.as_ref());
    let verdict = |r: Result<(), String>| r.map_or_else(Verdict::Deny, |()| Verdict::Allow);
    match endpoint {
        Endpoint::Databases => deployment_clients(w, request, old.as_ref(), new.as_ref()).await,
        Endpoint::Claims => {
            // A new MysqlDatabase its group will refuse is refused now, where
            // the user who creates it (kubectl, a Helm hook) reads the
            // answer, rather than later on its status only.
            let own = request.namespace.clone().unwrap_or_default();
            match new {
                Some(new) => w.authority.claim_refusal(&own, &new).await.map_or(Verdict::Allow, Verdict::Deny),
                None => Verdict::Deny("a create review without the object; refused".into()),
            }
        }
        Endpoint::Groups => {
            let create = matches!(request.operation, Operation::Create);
            // A create has nothing before it, whatever a review may carry.
            let old = if create { None } else { old };
            // Unreachable past check_envelope; garbage is never "allowed".
            let Some(new) = new else { return Verdict::Deny("a group review without the object; refused".into()) };
            // Checked first: the status check below may allow at once (the
            // operator's restore of its decision record).
            if let Err(e) = group::check_requesters(username(request), old.as_ref(), &new) {
                return Verdict::Deny(e);
            }
            if create {
                // A new group has no history, and the API server drops the
                // status of a create (the status subresource).
                return Verdict::Allow;
            }
            let Some(old) = old else {
                return Verdict::Deny("an update review of a group without the old object; refused".into());
            };
            let writer = if username(request) == w.operator { group::Writer::Operator } else { group::Writer::Other };
            let status_write =
                request.sub_resource.as_deref() == Some("status") || old.get("status") != new.get("status");
            if status_write && let Err(e) = group::check_status(writer, &w.operator, &old, &new) {
                // The operator restoring status to its decision record (after
                // a forged or hand-made edit) is the one move back allowed.
                if writer == group::Writer::Operator {
                    match decision_record(w, &new).await {
                        Ok(Some(record)) if group::restores_record(&new, &record) => return Verdict::Allow,
                        Ok(_) => {}
                        Err(why) => {
                            return Verdict::Deny(format!("{e}; and the decision record could not be read: {why}"));
                        }
                    }
                }
                return Verdict::Deny(e);
            }
            if request.sub_resource.is_none() {
                return verdict(group::check_spec(&old, &new));
            }
            Verdict::Allow
        }
        Endpoint::State => {
            let delete = matches!(request.operation, Operation::Delete);
            let name = object_name(request, old.as_ref(), new.as_ref());
            let name = name.as_str();
            if request.namespace.as_deref() != Some(w.namespace.as_str()) {
                return Verdict::Allow;
            }
            let Some(kind) = state::classify(&request.resource.resource, name, names::LEADER_LEASE_NAME) else {
                return Verdict::Allow;
            };
            let user = username(request);
            let who = if user == w.operator {
                state::Who::Operator
            } else if user == state::NAMESPACE_CONTROLLER {
                state::Who::NamespaceController
            } else if w.trusted_deleters.iter().any(|t| t == user) {
                state::Who::Trusted
            } else {
                state::Who::Other
            };
            verdict(state::check(kind, name, delete, who))
        }
        Endpoint::Jobs => inject_job(w, request, new.as_ref()).await,
    }
}

async fn deployment_clients(
    w: &Webhook,
    request: &AdmissionRequest<DynamicObject>,
    old: Option<&Value>,
    new: Option<&Value>,
) -> Verdict {
    let op = match request.operation {
        Operation::Create => database::Op::Create,
        Operation::Update => database::Op::Update,
        Operation::Delete => database::Op::Delete,
        Operation::Connect => return Verdict::Deny("CONNECT is not reviewed here; refused".into()),
    };
    let user = username(request);
    if op == database::Op::Delete && w.trusted_deleters.iter().any(|t| t == user) {
        return Verdict::Allow;
    }
    let own = request.namespace.clone().unwrap_or_default();
    let name = object_name(request, old, new);
    let namespaces = match database::namespaces_to_authorize(op, &own, old, new) {
        Ok(None) => return Verdict::Allow,
        Ok(Some(n)) => n,
        Err(e) => return Verdict::Deny(e),
    };
    let checks = namespaces.iter().map(|ns| w.authority.allowed(&request.user_info, database::VERB, ns, &name));
    let answers = futures::future::join_all(checks).await;
    let mut missing = Vec::new();
    for (ns, answer) in namespaces.iter().zip(answers) {
        match answer {
            Ok(true) => {}
            Ok(false) => missing.push(ns.clone()),
            Err(e) => return Verdict::Deny(format!("could not check authorization (fails closed): {e}")),
        }
    }
    if missing.is_empty() { Verdict::Allow } else { Verdict::Deny(database::refusal(user, &name, &own, &missing)) }
}

async fn inject_job(w: &Webhook, request: &AdmissionRequest<DynamicObject>, job: Option<&Value>) -> Verdict {
    let Some(job) = job else { return Verdict::Deny("a Job review without the Job; refused".into()) };
    if !inject::asks(job) {
        if inject::template_asks(job) && matches!(request.operation, Operation::Create) {
            return Verdict::Deny(inject::misplaced());
        }
        return Verdict::Allow;
    }
    if matches!(request.operation, Operation::Update) {
        // Sent only when the update adds the annotation (matchConditions):
        // a Job's Pod template is immutable, so it cannot be injected now,
        // and an annotation saying "inject" on a Job without the sidecar
        // would lie about how its migration runs.
        return Verdict::Deny(inject::too_late());
    }
    let ask = match inject::ask(job) {
        Ok(a) => a,
        Err(e) => return Verdict::Deny(e),
    };
    let namespace = request.namespace.clone().unwrap_or_default();
    if let Err(e) = w.authority.may_act(&namespace, &ask).await {
        return Verdict::Deny(e);
    }
    let settings = match w.inject_settings().await {
        Ok(s) => s,
        Err(e) => return Verdict::Deny(e),
    };
    match inject::patch(job, &ask, &settings) {
        Ok(p) => Verdict::Patch(p),
        Err(e) => Verdict::Deny(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_goes_out_as_base64_as_the_api_server_reads_it() {
        use base64::Engine as _;
        let request: AdmissionRequest<DynamicObject> = serde_json::from_value(serde_json::json!({
            "uid": "u", "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "name": "j", "operation": "CREATE", "userInfo": {}}))
        .unwrap();
        let patch = json_patch::Patch(vec![json_patch::PatchOperation::Add(json_patch::AddOperation {
            path: json_patch::jsonptr::PointerBuf::parse("/spec/backoffLimit").unwrap(),
            value: serde_json::json!(0),
        })]);
        let review = AdmissionResponse::from(&request).with_patch(patch).unwrap().into_review();
        let v = encode(&review).unwrap();
        let text = v["response"]["patch"].as_str().expect("a base64 string");
        let decoded = base64::engine::general_purpose::STANDARD.decode(text).unwrap();
        assert_eq!(String::from_utf8(decoded).unwrap(), r#"[{"op":"add","path":"/spec/backoffLimit","value":0}]"#);
        assert_eq!(v["response"]["patchType"], "JSONPatch");
        assert_eq!(v["response"]["uid"], "u");
    }

    #[allow(clippy::needless_pass_by_value)] // built inline at each call
    fn review(resource: (&str, &str, &str), operation: &str, object: Option<Value>, old: Option<Value>) -> Value {
        let (group, resource, kind) = resource;
        serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u", "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "name": "x", "operation": operation, "userInfo": {"username": "mallory"},
            "object": object, "oldObject": old}})
    }

    #[test]
    fn garbage_reviews_are_refused_before_any_guard_reads_them() {
        use serde_json::json;
        let group = (names::GROUP, "mysqlfailovergroups", "MysqlFailoverGroup");
        let g = json!({"apiVersion": "bloodraven.shipstream.io/v1alpha1", "kind": "MysqlFailoverGroup"});
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        let job = (("batch"), "jobs", "Job");
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {"bloodraven.shipstream.io/inject": "true"}}});
        let good = review(group, "UPDATE", Some(g.clone()), Some(g.clone()));
        assert_eq!(check_envelope(Endpoint::Groups, &good), Ok(()));
        // A create: the `-by` annotations of a new group.
        assert_eq!(check_envelope(Endpoint::Groups, &review(group, "CREATE", Some(g.clone()), None)), Ok(()));
        let mut beta = good.clone();
        beta["apiVersion"] = json!("admission.k8s.io/v1beta1");
        let mut no_request = good.clone();
        no_request.as_object_mut().unwrap().remove("request");
        let cases = [
            (Endpoint::Groups, beta, "not an admission.k8s.io/v1"),
            (Endpoint::Groups, no_request, "no request"),
            (Endpoint::Groups, review(group, "UPDATE", Some(g.clone()), None), "needs request.oldObject"),
            (Endpoint::Groups, review(group, "UPDATE", Some(cm.clone()), Some(g.clone())), "request.object is not"),
            (Endpoint::Groups, review(group, "CREATE", None, None), "needs request.object"),
            (Endpoint::Groups, review(group, "DELETE", None, Some(g.clone())), "does not review \"DELETE\""),
            (
                Endpoint::State,
                review(("", "pods", "Pod"), "DELETE", None, Some(cm.clone())),
                "does not review resource",
            ),
            (Endpoint::Jobs, review(job, "CREATE", Some(pod), None), "request.object is not a Job"),
            (
                Endpoint::Jobs,
                review(job, "DELETE", None, Some(json!({"apiVersion": "batch/v1", "kind": "Job"}))),
                "DELETE",
            ),
            (Endpoint::Databases, review(group, "DELETE", None, Some(g.clone())), "does not review resource"),
        ];
        for (endpoint, r, says) in cases {
            let e = check_envelope(endpoint, &r).unwrap_err();
            assert!(e.contains(says), "{endpoint:?}: {e} (wanted {says})");
        }
        // A delete carries only the old object; that is its shape.
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"});
        let delete = review(("coordination.k8s.io", "leases", "Lease"), "DELETE", None, Some(lease));
        assert_eq!(check_envelope(Endpoint::State, &delete), Ok(()));
    }

    #[test]
    fn the_api_servers_timeout_values_parse() {
        assert_eq!(parse_timeout("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_timeout("1500ms"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_timeout("1m"), Some(Duration::from_secs(60)));
        for bad in ["", "s", "10", "10h", "-1s", "1.5s"] {
            assert_eq!(parse_timeout(bad), None, "{bad}");
        }
    }
}
