//! The Job a planned disruption runs on one site (an ordered update's, a
//! restore-in-place's): made from the request's `jobTemplate` with what
//! the operator sets on it (`bloodraven_api::v1alpha1::JobTemplate` lists
//! it), created once under a name fixed by the request and the site (so a
//! new leader finds the one that runs, never a second), and read back as
//! the rules' [`JobState`].

use std::collections::BTreeMap;

use bloodraven_api::names::ENGINE_FIELD_MANAGER;
use bloodraven_api::names::deploy_lease::group_hash;
use bloodraven_api::names::site_job::{
    GROUP_ENV, OPERATION_LABEL, REQUEST_ID_ANNOTATION, REQUEST_ID_ENV, SITE_ENV, SITE_HOST_ENV, SITE_LABEL,
    SITE_PORT_ENV, SITE_ROLE_ENV,
};
use bloodraven_api::v1alpha1::{JobTemplate, MysqlFailoverGroup, Site, SiteJobStatus};
use bloodraven_core::failover::disruption::JobState;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, EnvVar};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Resource, ResourceExt};
use sha2::{Digest, Sha256};

use crate::controller::{Error, kube_err};

/// What one Job is made from.
pub(crate) struct JobSpecFor<'a> {
    /// The group: the Job's owner.
    pub(crate) group: &'a MysqlFailoverGroup,
    /// `ordered-update` or `restore-in-place` (its label).
    pub(crate) operation: &'static str,
    /// The request's id.
    pub(crate) request_id: &'a str,
    /// Where the Job runs.
    pub(crate) namespace: &'a str,
    /// The request's template.
    pub(crate) template: &'a JobTemplate,
    /// Its `activeDeadlineSeconds`.
    pub(crate) deadline_seconds: u32,
    /// The site it works on.
    pub(crate) site: &'a Site,
    /// The site's role in the request (`BLOODRAVEN_SITE_ROLE`).
    pub(crate) role: &'static str,
    /// The Job's uid, once the decision record pinned it: another Job of
    /// the name is refused.
    pub(crate) job_uid: Option<&'a str>,
}

/// Why a Job was not created.
#[derive(Debug)]
pub(crate) enum EnsureError {
    /// Not for retrying: the template is not a Job, the API server refused
    /// it, or a Job of that name is not this request's. Ends the request.
    Refused(String),
    /// The API server could not be asked: retried next round.
    Api(Error),
}

/// A request's `activeDeadlineSeconds` within its operation's bounds
/// (60–21600 for an ordered update, 60–86400 for a restore), whatever
/// status says: it bounds how long the request holds a promotion.
pub(crate) fn deadline_seconds(operation: &str, stored: Option<u32>) -> u32 {
    use bloodraven_api::v1alpha1::{
        MAX_RESTORE_DEADLINE_SECONDS, MAX_UPDATE_DEADLINE_SECONDS, MIN_JOB_DEADLINE_SECONDS,
    };
    let max = if operation == bloodraven_api::names::site_job::OPERATION_ORDERED_UPDATE {
        MAX_UPDATE_DEADLINE_SECONDS
    } else {
        MAX_RESTORE_DEADLINE_SECONDS
    };
    stored.unwrap_or(MIN_JOB_DEADLINE_SECONDS).clamp(MIN_JOB_DEADLINE_SECONDS, max)
}

/// The Job's name: at most 63 characters (a label value: Kubernetes
/// labels each Pod with its Job's name), fixed by the group, the
/// operation, the request and the site, and different for any two of
/// them (a hash of all four ends it).
pub(crate) fn job_name(group: &str, operation: &str, request_id: &str, site: &str) -> String {
    let digest = Sha256::digest(format!("{group}\n{operation}\n{request_id}\n{site}").as_bytes());
    let mut hash = format!("{digest:x}");
    hash.truncate(10);
    let short =
        if operation == bloodraven_api::names::site_job::OPERATION_ORDERED_UPDATE { "update" } else { "restore" };
    let head = |s: &str, n: usize| -> String {
        s.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(n).collect::<String>().to_ascii_lowercase()
    };
    // 20 + 1 + 7 + 1 + 20 + 1 + 10 = 60 at most.
    let name = format!("{}-{short}-{}-{hash}", head(group, 20), head(site, 20));
    name.trim_start_matches('-').replace("--", "-")
}

/// The Job of `spec`, or why the template does not make one.
pub(crate) fn build(spec: &JobSpecFor<'_>) -> Result<Job, String> {
    let mut job_spec =
        spec.template.job_spec().map_err(|e| format!("jobTemplate.spec is not a batch/v1 JobSpec: {e}"))?;
    let group_name = spec.group.name_any();
    // Fail-closed: a site's update or restore that half ran is not run
    // again without a person.
    job_spec.backoff_limit = Some(0);
    job_spec.completions = Some(1);
    job_spec.parallelism = Some(1);
    job_spec.active_deadline_seconds = Some(i64::from(deadline_seconds(spec.operation, Some(spec.deadline_seconds))));
    job_spec.selector = None;
    job_spec.manual_selector = None;
    job_spec.suspend = None;
    // Nothing that would run a Pod again, hand the Job to another
    // controller, or remove it (and its logs) when it ends.
    job_spec.pod_failure_policy = None;
    job_spec.backoff_limit_per_index = None;
    job_spec.max_failed_indexes = None;
    job_spec.completion_mode = Some("NonIndexed".to_owned());
    job_spec.success_policy = None;
    job_spec.pod_replacement_policy = None;
    job_spec.managed_by = None;
    job_spec.ttl_seconds_after_finished = None;
    let pod = job_spec.template.spec.as_mut().ok_or("jobTemplate.spec.template.spec is missing")?;
    if pod.containers.is_empty() {
        return Err("jobTemplate.spec.template.spec.containers is empty".to_owned());
    }
    pod.restart_policy = Some("Never".to_owned());
    let env = [
        (GROUP_ENV, group_name.clone()),
        (SITE_ENV, spec.site.name.clone()),
        (SITE_HOST_ENV, spec.site.host.clone()),
        (SITE_PORT_ENV, spec.site.port.to_string()),
        (SITE_ROLE_ENV, spec.role.to_owned()),
        (REQUEST_ID_ENV, spec.request_id.to_owned()),
    ];
    let set_env = |c: &mut Container| {
        let vars = c.env.get_or_insert_with(Vec::new);
        vars.retain(|v| !env.iter().any(|(name, _)| v.name == *name));
        vars.extend(env.iter().map(|(name, value)| EnvVar {
            name: (*name).to_owned(),
            value: Some(value.clone()),
            value_from: None,
        }));
    };
    pod.containers.iter_mut().for_each(set_env);
    pod.init_containers.iter_mut().flatten().for_each(set_env);
    let template_meta = spec.template.metadata.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = template_meta.labels;
    labels.insert("app.kubernetes.io/managed-by".to_owned(), "bloodraven-operator".to_owned());
    labels.insert(bloodraven_api::names::deploy_lease::GROUP_HASH_LABEL.to_owned(), group_hash(&group_name));
    labels.insert(SITE_LABEL.to_owned(), spec.site.name.clone());
    labels.insert(OPERATION_LABEL.to_owned(), spec.operation.to_owned());
    let mut annotations = template_meta.annotations;
    annotations.insert(REQUEST_ID_ANNOTATION.to_owned(), spec.request_id.to_owned());
    let mut owner = spec.group.controller_owner_ref(&()).ok_or("the group has no uid yet")?;
    // Blocking the group's deletion on the Job would need the group's
    // finalizers permission; the Job goes with the group either way.
    owner.block_owner_deletion = None;
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(job_name(&group_name, spec.operation, spec.request_id, &spec.site.name)),
            namespace: Some(spec.namespace.to_owned()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(job_spec),
        status: None,
    })
}

/// The state the rules read, from a Job as stored: its `Complete` or
/// `Failed` condition (reason and message), else running.
pub(crate) fn state_of(job: &Job) -> JobState {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref()).cloned().unwrap_or_default();
    let true_ = |t: &str| conditions.iter().find(|c| c.type_ == t && c.status == "True");
    if true_("Complete").is_some() {
        return JobState::Complete;
    }
    if let Some(c) = true_("Failed") {
        let reason = c.reason.clone().unwrap_or_else(|| "Failed".to_owned());
        let message =
            c.message.clone().map(|m| format!(": {}", bloodraven_serving::log::escape(&m, 200))).unwrap_or_default();
        return JobState::Failed(format!("{reason}{message}"));
    }
    JobState::Running
}

/// Which request's Job one is: what makes a Job of the expected name ours.
pub(crate) struct JobOf<'a> {
    /// The group's uid (the Job's owner).
    pub(crate) group_uid: &'a str,
    /// The operation label.
    pub(crate) operation: &'a str,
    /// The site label.
    pub(crate) site: &'a str,
    /// The request-id annotation.
    pub(crate) request_id: &'a str,
    /// The Job's uid, once the decision record pinned it.
    pub(crate) job_uid: Option<&'a str>,
}

/// Whether `job` is the one `of` names (its owner, labels and request,
/// and its uid once pinned), so a Job of the same name made by someone
/// else is never taken for it.
fn ours(job: &Job, of: &JobOf<'_>) -> bool {
    let labels = job.labels();
    let owned = job.owner_references().iter().any(|o| o.uid == of.group_uid);
    owned
        && of.job_uid.is_none_or(|uid| job.metadata.uid.as_deref() == Some(uid))
        && labels.get(OPERATION_LABEL).map(String::as_str) == Some(of.operation)
        && labels.get(SITE_LABEL).map(String::as_str) == Some(of.site)
        && job.annotations().get(REQUEST_ID_ANNOTATION).map(String::as_str) == Some(of.request_id)
}

impl JobSpecFor<'_> {
    fn of(&self) -> JobOf<'_> {
        JobOf {
            group_uid: self.group.metadata.uid.as_deref().unwrap_or_default(),
            operation: self.operation,
            site: &self.site.name,
            request_id: self.request_id,
            job_uid: self.job_uid,
        }
    }
}

/// The state of a Job as the rules read it, given what status recorded of
/// it: a Job seen running that is gone now (deleted by hand, or its
/// namespace) failed: it is never run again, since a site's update or
/// restore that may have half run needs a person; one whose end status
/// recorded (and that a `ttlSecondsAfterFinished` removed since) keeps
/// that end.
///
/// A Job the decision record pinned (`pinned`: the operator made it) is
/// judged on itself alone: status can be written by others, so an end it
/// records for a Job that is gone is no end; gone before the operator saw
/// it end, it failed.
pub(crate) fn with_record(observed: JobState, recorded: Option<&SiteJobStatus>, pinned: bool) -> JobState {
    if pinned {
        return match observed {
            JobState::Absent => JobState::Failed(
                "the Job the operator made is gone before it was seen to end; it is not run again (the site may be half done)"
                    .to_owned(),
            ),
            observed => observed,
        };
    }
    match (observed, recorded.map(|r| (r.result.as_str(), r))) {
        (JobState::Absent, Some(("Complete", _))) => JobState::Complete,
        (JobState::Absent, Some(("Failed", r))) => {
            JobState::Failed(r.message.clone().unwrap_or_else(|| "Failed".into()))
        }
        (JobState::Absent, Some(("Running", r))) => JobState::Failed(format!(
            "Job {} was deleted before it ended; it is not run again (the site may be half done)",
            r.job_name
        )),
        (observed, _) => observed,
    }
}

/// What [`ensure`] found or made.
pub(crate) struct Ensured {
    /// The Job's state.
    pub(crate) state: JobState,
    /// Its uid, for the decision record to pin.
    pub(crate) uid: String,
    /// Made now (not found made before).
    pub(crate) created: bool,
}

/// Creates the Job of `spec` unless it exists, and returns its state and uid.
pub(crate) async fn ensure(ctx: &crate::controller::Context, spec: &JobSpecFor<'_>) -> Result<Ensured, EnsureError> {
    if let Some(why) = namespace_refused(ctx, spec.namespace, &spec.group.name_any()) {
        return Err(EnsureError::Refused(why));
    }
    let client = &ctx.client;
    let job = build(spec).map_err(EnsureError::Refused)?;
    let api: Api<Job> = Api::namespaced(client.clone(), spec.namespace);
    let params = PostParams { field_manager: Some(ENGINE_FIELD_MANAGER.to_owned()), ..PostParams::default() };
    let (stored, created) = match api.create(&params, &job).await {
        Ok(created) => (created, true),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let name = job.name_any();
            let found = api.get(&name).await.map_err(|e| EnsureError::Api(kube_err("read the site's Job")(e)))?;
            if !ours(&found, &spec.of()) {
                return Err(EnsureError::Refused(format!(
                    "a Job named {name} in namespace {} exists and is not this request's; delete or rename it",
                    spec.namespace
                )));
            }
            (found, false)
        }
        Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 404 | 422) => {
            return Err(refused_by_api(&e));
        }
        Err(e) => return Err(EnsureError::Api(kube_err("create the site's Job")(e))),
    };
    Ok(Ensured { state: state_of(&stored), uid: stored.metadata.uid.clone().unwrap_or_default(), created })
}

/// A Job the API server refused, as the request's message and history
/// keep it: the server's message quotes the template (a name, a field, a
/// value), which the group's editor wrote and can make as long as the
/// object allows, and every status write carries it. Bounded, and
/// escaped as log fields are.
fn refused_by_api(e: &kube::core::Status) -> EnsureError {
    let message = bloodraven_serving::log::escape(&e.message, 300);
    EnsureError::Refused(format!("the API server refused it ({}): {message}", e.code))
}

/// Asks the API server to validate the Job of `spec` without creating it
/// (a server-side dry run): a template it refuses fails the request at its
/// admission, before any site is touched, rather than at a later step.
pub(crate) async fn dry_run(client: &kube::Client, spec: &JobSpecFor<'_>) -> Result<(), EnsureError> {
    let job = build(spec).map_err(EnsureError::Refused)?;
    let api: Api<Job> = Api::namespaced(client.clone(), spec.namespace);
    let params = PostParams { dry_run: true, field_manager: Some(ENGINE_FIELD_MANAGER.to_owned()) };
    match api.create(&params, &job).await {
        // A Job of that name exists: this request's own, after a restart,
        // or someone else's, which the step refuses when it comes.
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 404 | 422) => Err(refused_by_api(&e)),
        Err(e) => Err(EnsureError::Api(kube_err("dry-run the site's Job")(e))),
    }
}

/// The state of the Job `name` in `namespace`; absent when there is none.
/// A Job of that name that is not the one `of` names (made by someone
/// else) is read as failed: it is never taken for the request's.
pub(crate) async fn observe(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    of: &JobOf<'_>,
) -> Result<JobState, Error> {
    if namespace.is_empty() {
        return Ok(JobState::Absent);
    }
    let api: Api<Job> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await.map_err(kube_err("read the site's Job"))? {
        Some(job) if ours(&job, of) => Ok(state_of(&job)),
        Some(_) => Ok(JobState::Failed(format!(
            "a Job named {name} in namespace {namespace} exists and is not this request's; delete or rename it"
        ))),
        None => Ok(JobState::Absent),
    }
}

/// Whether the Job `of` names has ended (complete or failed) by its own
/// record: a Job not made yet, deleted (its Pod may run on, orphaned) or
/// replaced by another of the same name has not.
pub(crate) async fn ended(client: &kube::Client, namespace: &str, name: &str, of: &JobOf<'_>) -> Result<bool, Error> {
    if namespace.is_empty() {
        return Ok(false);
    }
    let api: Api<Job> = Api::namespaced(client.clone(), namespace);
    let job = api.get_opt(name).await.map_err(kube_err("read the site's Job"))?;
    Ok(job.is_some_and(|job| ours(&job, of) && matches!(state_of(&job), JobState::Complete | JobState::Failed(_))))
}

/// Why a request of `group` may not run its Jobs in `namespace`, if so:
/// the operator's own namespace (a Job there could run as the operator),
/// or one a cluster admin did not allow for that group. Checked when the
/// request is taken up and again before each Job, whatever status says.
pub(crate) fn namespace_refused(ctx: &crate::controller::Context, namespace: &str, group: &str) -> Option<String> {
    if namespace == ctx.namespace {
        return Some(format!(
            "namespace {namespace} is the operator's own: a Job there could run as the operator; run the Jobs in another namespace"
        ));
    }
    let labels = ctx.authority.labels(namespace);
    let annotations = ctx.authority.namespace_annotations(namespace);
    namespace_refusal(namespace, group, labels.as_ref(), annotations.as_ref())
}

/// Why `namespace` (its `labels` and `annotations`; `None`: it does not
/// exist) does not allow the Jobs of `group`'s requests, if so: a cluster
/// admin labels it (`names::site_job::NAMESPACE_LABEL`) and names the
/// groups (`names::site_job::NAMESPACE_GROUPS_ANNOTATION`). A Job runs as
/// any ServiceAccount of its namespace, with its Secrets.
fn namespace_refusal(
    namespace: &str,
    group: &str,
    labels: Option<&BTreeMap<String, String>>,
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<String> {
    use bloodraven_api::names::site_job::{
        NAMESPACE_ALLOWED, NAMESPACE_ANY_GROUP, NAMESPACE_GROUPS_ANNOTATION, NAMESPACE_LABEL,
    };
    let labelled = labels.is_some_and(|l| l.get(NAMESPACE_LABEL).map(String::as_str) == Some(NAMESPACE_ALLOWED));
    if !labelled {
        return Some(format!(
            "namespace {namespace} does not allow site Jobs (or does not exist): a cluster admin labels it {NAMESPACE_LABEL}={NAMESPACE_ALLOWED} and names the groups allowed in its annotation {NAMESPACE_GROUPS_ANNOTATION} first, since its Jobs run as any of its ServiceAccounts"
        ));
    }
    let named = annotations
        .and_then(|a| a.get(NAMESPACE_GROUPS_ANNOTATION))
        .is_some_and(|groups| groups.split(',').map(str::trim).any(|g| g == group || g == NAMESPACE_ANY_GROUP));
    (!named).then(|| {
        format!(
            "namespace {namespace} allows site Jobs, but not group {group}'s: a cluster admin names the group in the namespace's annotation {NAMESPACE_GROUPS_ANNOTATION} (comma-separated, or {NAMESPACE_ANY_GROUP} for every group), since its Jobs run as any of its ServiceAccounts"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloodraven_api::v1alpha1::MysqlFailoverGroupSpec;

    fn group() -> MysqlFailoverGroup {
        let spec: MysqlFailoverGroupSpec = serde_json::from_value(serde_json::json!({
            "initialActiveSite": "iad",
            "sites": [
                {"name": "iad", "host": "h1", "port": 3306, "credentialsSecretRef": {"namespace": "n", "name": "s"}},
                {"name": "pdx", "host": "h2", "port": 3307, "credentialsSecretRef": {"namespace": "n", "name": "s"}},
            ],
        }))
        .unwrap();
        let mut g = MysqlFailoverGroup::new("orders", spec);
        g.metadata.uid = Some("uid-1".into());
        g
    }

    fn template(spec: &serde_json::Value) -> JobTemplate {
        serde_json::from_value(
            serde_json::json!({"metadata": {"labels": {"team": "db", SITE_LABEL: "forged"}}, "spec": spec}),
        )
        .unwrap()
    }

    #[test]
    fn the_operator_sets_what_makes_the_job_fail_closed_and_tells_it_its_site() {
        let g = group();
        let t = template(&serde_json::json!({
            "backoffLimit": 6, "suspend": true, "selector": {"matchLabels": {"a": "b"}},
            "template": {"spec": {
                "restartPolicy": "OnFailure",
                "initContainers": [{"name": "init", "image": "i"}],
                "containers": [{"name": "u", "image": "u", "env": [{"name": "BLOODRAVEN_SITE", "value": "iad"}, {"name": "KEEP", "value": "1"}]}],
            }},
        }));
        let spec = JobSpecFor {
            group: &g,
            operation: "ordered-update",
            request_id: "u1",
            namespace: "jobs",
            template: &t,
            deadline_seconds: 900,
            site: &g.spec.sites[1],
            role: "standby",
            job_uid: None,
        };
        let mut job = build(&spec).unwrap();
        let js = job.spec.as_ref().unwrap();
        assert_eq!((js.backoff_limit, js.active_deadline_seconds, js.suspend), (Some(0), Some(900), None));
        assert!(js.selector.is_none());
        let pod = js.template.spec.as_ref().unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let env = |c: &Container| -> Vec<(String, String)> {
            c.env.clone().unwrap().into_iter().map(|v| (v.name, v.value.unwrap_or_default())).collect()
        };
        let main = env(&pod.containers[0]);
        assert!(main.contains(&("BLOODRAVEN_SITE".into(), "pdx".into())), "{main:?}");
        assert!(!main.contains(&("BLOODRAVEN_SITE".into(), "iad".into())), "the template's value is replaced");
        assert!(main.contains(&("KEEP".into(), "1".into())));
        assert!(main.contains(&("BLOODRAVEN_SITE_PORT".into(), "3307".into())));
        assert!(main.contains(&("BLOODRAVEN_SITE_ROLE".into(), "standby".into())));
        let init = env(&pod.init_containers.as_ref().unwrap()[0]);
        assert!(init.contains(&("BLOODRAVEN_GROUP".into(), "orders".into())), "{init:?}");
        let labels = job.labels();
        assert_eq!(labels.get("team").map(String::as_str), Some("db"));
        assert_eq!(labels.get(SITE_LABEL).map(String::as_str), Some("pdx"), "the operator's labels win");
        assert_eq!(job.owner_references()[0].uid, "uid-1");
        assert!(ours(&job, &spec.of()));
        assert!(!ours(&job, &JobSpecFor { request_id: "u2", ..spec }.of()));
        // Once pinned, only the Job of that uid: a look-alike made after
        // ours was deleted is not ours.
        job.metadata.uid = Some("job-1".into());
        assert!(ours(&job, &JobSpecFor { job_uid: Some("job-1"), ..spec }.of()));
        assert!(!ours(&job, &JobSpecFor { job_uid: Some("job-0"), ..spec }.of()));
    }

    #[test]
    fn a_template_that_is_not_a_job_is_refused_with_the_field() {
        let g = group();
        for (spec, want) in [
            (serde_json::json!({"template": {"spec": {"containers": "x"}}}), "not a batch/v1 JobSpec"),
            (serde_json::json!({"template": {"spec": {"containers": []}}}), "containers is empty"),
            (serde_json::json!({"template": {}}), "template.spec is missing"),
        ] {
            let t = template(&spec);
            let s = JobSpecFor {
                group: &g,
                operation: "ordered-update",
                request_id: "u1",
                namespace: "jobs",
                template: &t,
                deadline_seconds: 60,
                site: &g.spec.sites[0],
                role: "standby",
                job_uid: None,
            };
            let err = build(&s).unwrap_err();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn a_job_name_is_fixed_short_and_its_own() {
        let long = "x".repeat(253);
        let n = job_name(&long, "restore-in-place", &"r".repeat(128), &"s".repeat(63));
        assert!(n.len() <= 63, "{n}");
        assert_eq!(
            job_name("orders", "ordered-update", "u1", "pdx"),
            job_name("orders", "ordered-update", "u1", "pdx")
        );
        let names = [
            job_name("orders", "ordered-update", "u1", "pdx"),
            job_name("orders", "ordered-update", "u2", "pdx"),
            job_name("orders", "ordered-update", "u1", "iad"),
            job_name("orders", "restore-in-place", "u1", "pdx"),
            job_name("orders.a", "ordered-update", "u1", "pdx"),
        ];
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert!(names.iter().all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')));
    }

    #[test]
    fn a_job_gone_after_it_ran_failed_and_one_gone_after_its_end_keeps_it() {
        let rec = |result: &str| SiteJobStatus {
            site: "pdx".into(),
            role: "standby".into(),
            job_name: "g-update-pdx-0123456789".into(),
            result: result.into(),
            message: (result == "Failed").then(|| "DeadlineExceeded".into()),
            ..SiteJobStatus::default()
        };
        assert_eq!(with_record(JobState::Absent, None, false), JobState::Absent, "never created: run it");
        let JobState::Failed(why) = with_record(JobState::Absent, Some(&rec("Running")), false) else { panic!() };
        assert!(why.contains("deleted before it ended") && why.contains("not run again"), "{why}");
        assert_eq!(with_record(JobState::Absent, Some(&rec("Complete")), false), JobState::Complete);
        // Pinned (the operator made it): an end status records for a Job
        // that is gone (status written by hand) is no end.
        assert!(matches!(with_record(JobState::Absent, Some(&rec("Complete")), true), JobState::Failed(_)));
        assert!(matches!(with_record(JobState::Absent, None, true), JobState::Failed(_)), "never run again");
        assert_eq!(with_record(JobState::Complete, Some(&rec("Running")), true), JobState::Complete);
        assert_eq!(
            with_record(JobState::Absent, Some(&rec("Failed")), false),
            JobState::Failed("DeadlineExceeded".into())
        );
        assert_eq!(with_record(JobState::Running, Some(&rec("Running")), false), JobState::Running);
    }

    #[test]
    fn a_jobs_end_is_read_from_its_conditions() {
        let with = |t: &str, reason: &str| -> Job {
            serde_json::from_value(serde_json::json!({"status": {"conditions": [
                {"type": t, "status": "True", "reason": reason, "message": "Job was active longer than specified deadline"}]}}))
            .unwrap()
        };
        assert_eq!(state_of(&with("Complete", "")), JobState::Complete);
        let JobState::Failed(why) = state_of(&with("Failed", "DeadlineExceeded")) else { panic!() };
        assert!(why.starts_with("DeadlineExceeded: Job was active"), "{why}");
        assert_eq!(state_of(&Job::default()), JobState::Running);
    }

    #[test]
    fn a_namespace_allows_the_jobs_only_of_the_groups_its_admin_named() {
        use bloodraven_api::names::site_job::{NAMESPACE_GROUPS_ANNOTATION, NAMESPACE_LABEL};
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        let labelled = map(&[(NAMESPACE_LABEL, "allowed")]);
        let refusal = |labels: Option<&BTreeMap<String, String>>, groups: Option<&str>| {
            let annotations = groups.map(|g| map(&[(NAMESPACE_GROUPS_ANNOTATION, g)]));
            namespace_refusal("maint", "orders", labels, annotations.as_ref())
        };
        for allowed in ["orders", " payments , orders ", "*", "payments,*"] {
            assert_eq!(refusal(Some(&labelled), Some(allowed)), None, "{allowed}");
        }
        // Another group's namespace, or one named by a look-alike.
        for other in ["payments", "", "orders-2", "order", "ORDERS", "orders;payments"] {
            let why = refusal(Some(&labelled), Some(other)).unwrap();
            assert!(why.contains("not group orders's") && why.contains(NAMESPACE_GROUPS_ANNOTATION), "{other}: {why}");
        }
        assert!(refusal(Some(&labelled), None).unwrap().contains("not group orders's"));
        // Not labelled (or labelled otherwise), or no such namespace.
        let wrong = map(&[(NAMESPACE_LABEL, "yes")]);
        for labels in [None, Some(&wrong), Some(&BTreeMap::new())] {
            let why = refusal(labels, Some("*")).unwrap();
            assert!(why.contains("does not allow site Jobs") && why.contains("site-jobs=allowed"), "{why}");
        }
    }
}
