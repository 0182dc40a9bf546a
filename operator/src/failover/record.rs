//! The decision record: the operator's own copy of each group's decided
//! `activeSite` and `topologyGeneration`, a ConfigMap in the operator's
//! namespace (`bloodraven-topology-<sha256(group)[..16]>`), tied to the
//! group's UID.
//!
//! Why: `status.topologyGeneration` must never go backwards, yet status can
//! be wiped or edited (a restore, `kubectl replace`, a script). Every
//! decision is written here first (resourceVersion CAS), then to status; on
//! every probe the operator compares the two and restores status from the
//! record. Status alone can therefore never re-bootstrap a group at 1.
//!
//! Integrity: every record carries `digest`, an HMAC-SHA256 of its decision
//! fields under a key only the operator holds (Secret
//! `bloodraven-record-key` in its namespace, created at first start). A
//! record whose digest is missing or does not verify — edited with
//! `kubectl edit`/`patch`/`apply`/`replace`, whatever field manager the
//! edit names, or written by an older operator — is never trusted: the
//! group gets `DecisionConflict` and the operator refuses to fail it over
//! until a person resolves it (docs/runbook.md). The field managers that
//! own its fields are named in the message when they are not the
//! operator's, to say who edited it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use sha2::Sha256;

use crate::controller::{Error, kube_err};

/// Secret (in the operator's namespace) holding the key of record digests.
pub(crate) const KEY_SECRET: &str = bloodraven_api::names::state::SECRET_NAMES[0];
const KEY_FIELD: &str = "key";
/// Label of every decision record ConfigMap (value `topology`).
const RECORD_LABEL: &str = "bloodraven.shipstream.io/record";

/// Loads the digest key from [`KEY_SECRET`], creating it (32 random bytes)
/// when absent; once, at start-up, before any record is read or written
/// ([`Records::start`] takes it).
/// Errors: the Secret cannot be read or created (RBAC), or holds no `key`.
pub(crate) async fn load_key(api: &Api<k8s_openapi::api::core::v1::Secret>) -> Result<Vec<u8>, Error> {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    let existing = api.get_opt(KEY_SECRET).await.map_err(kube_err("read the decision-record key"))?;
    let secret = if let Some(s) = existing {
        s
    } else {
        let fresh = Secret {
            metadata: ObjectMeta { name: Some(KEY_SECRET.to_owned()), ..ObjectMeta::default() },
            data: Some(BTreeMap::from([(KEY_FIELD.to_owned(), ByteString(rand::random::<[u8; 32]>().to_vec()))])),
            ..Secret::default()
        };
        match api.create(&PostParams::default(), &fresh).await {
            Ok(s) => s,
            // Another replica created it first: use that one.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                api.get(KEY_SECRET).await.map_err(kube_err("read the decision-record key"))?
            }
            Err(e) => return Err(kube_err("create the decision-record key")(e)),
        }
    };
    let key = secret.data.and_then(|d| d.get(KEY_FIELD).map(|b| b.0.clone())).filter(|k| k.len() >= 16);
    let Some(key) = key else {
        return Err(Error::Site {
            action: "load the decision-record key from",
            site: KEY_SECRET.to_owned(),
            message: format!(
                "Secret {KEY_SECRET} has no key `{KEY_FIELD}` of at least 16 bytes; delete it and restart"
            ),
        });
    };
    Ok(key)
}

/// HMAC-SHA256 (hex) of the decision fields of `data` under `key`.
fn digest(key: &[u8], data: &BTreeMap<String, String>) -> Option<String> {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
    for field in DECISION_KEYS {
        mac.update(field.as_bytes());
        mac.update(b"=");
        mac.update(data.get(field).map_or("", String::as_str).as_bytes());
        mac.update(b"\n");
    }
    // Keys added after the first release count only when present, so a
    // record written before they existed still verifies; once written, a
    // removed one fails the digest like any other edit.
    for field in OPTIONAL_KEYS {
        if let Some(value) = data.get(field).filter(|v| !v.is_empty()) {
            mac.update(field.as_bytes());
            mac.update(b"=");
            mac.update(value.as_bytes());
            mac.update(b"\n");
        }
    }
    Some(format!("{:x}", mac.finalize().into_bytes()))
}

/// Whether `data` carries a digest that verifies under `key` (constant time).
fn verifies(key: &[u8], data: &BTreeMap<String, String>) -> bool {
    match (data.get("digest"), digest(key, data)) {
        (Some(have), Some(want)) => bloodraven_core::lease::machine::constant_time_eq(have.as_bytes(), want.as_bytes()),
        _ => false,
    }
}

/// A decision as recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Record {
    /// The decided active site.
    pub active_site: String,
    /// The decided topology generation (≥ 1).
    pub generation: i64,
    /// UID of the group the record belongs to.
    pub group_uid: String,
    /// resourceVersion of the ConfigMap, for the next compare-and-swap.
    pub resource_version: Option<String>,
    /// The GTID position the active site was promoted at (its
    /// `gtid_current_pos` before it took writes); a returning former primary
    /// with transactions past it has errant GTIDs. `None` before the first
    /// failover.
    pub promotion_position: Option<String>,
    /// The last planned-failover `requestId`s taken up, newest last (at most
    /// [`MAX_REQUESTS`]): a repeated or older request is not run again.
    pub requests: Vec<String>,
    /// The planned failover the operator admitted (`requestId target
    /// source`), written before its drain: a request in a later phase that
    /// the record does not name was not run by the operator (status is
    /// writable by anyone with access to it) and is never acted on.
    pub admitted: Option<String>,
    /// A step after the decision still to do: `promote` (an emergency
    /// failover decided, the new active site not yet made writable).
    pub pending: Option<String>,
    /// What a site operation holds of the sites beyond its status (see
    /// [`SiteHold`]).
    pub site_hold: Option<SiteHold>,
    /// The requests taken up and not yet ended (at most one per operation:
    /// a planned failover and an ordered update may both wait behind one
    /// failover-hold), each with the terms it was taken up on, one word
    /// each: its id as in `requests`, then its sites, generation and (for an
    /// operation that runs a Job) namespace and deadline
    /// (`failover::request::in_flight_words`). A request in a phase past
    /// `Pending` runs only while status shows exactly these terms: status
    /// can be written by anyone allowed to, and a finished request written
    /// back into a running phase, or a running one pointed at other sites
    /// or another namespace, is never acted on. Removed once the request
    /// ends. Key `inFlight`, one request per line.
    pub in_flight: Vec<String>,
    /// Set when the record was edited by hand: which managers own which of
    /// its decision fields. Such a record is never trusted.
    pub tampered: Option<String>,
}

/// What an ordered update or a restore-in-place holds of a site, kept in
/// the record because status is the users' to read and can be edited,
/// wiped or restored from a backup: a hold derived from status alone was
/// lifted by a hand-written `phase: Completed`, and a stale old primary was
/// repointed and later promoted. The engine writes it before the step it
/// guards and clears it when the step is over; the safety paths read it
/// whatever status shows (key `siteHold`: `job SITE UNTIL NAMESPACE
/// REQUEST`, `reclone SITE GENERATION REQUEST` or `unrestored SITE
/// GENERATION REQUEST`, REQUEST as in `requests`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SiteHold {
    /// A site's Job (in `namespace`) may run: the site is not promoted
    /// before `until` (Unix seconds: the Job's deadline and a grace) unless
    /// the Job has ended or the hold is cleared first. `job_uid` pins the
    /// Job once it is made: a Job of the same name, labels and owner made
    /// by someone else after ours was deleted (its Pod may run on) is not
    /// ours, and its end ends nothing.
    Job { site: String, until: i64, namespace: String, request: String, job_uid: Option<String> },
    /// A restore-in-place decided `generation`: `site`, the old primary,
    /// holds data that predates the restored primary; it is never promoted
    /// nor repointed until a person re-clones it and marks it done.
    Reclone { site: String, generation: i64, request: String },
    /// A restore-in-place failed after its Job was made, at `generation`:
    /// `site` holds whatever the Job left (a half-loaded dump, another
    /// server's data). It is never promoted nor rejoined as a replica
    /// until a person re-clones it (or restores it again by hand) and
    /// marks it done, as for [`SiteHold::Reclone`]. Nothing was decided:
    /// the generation is the one in force.
    Unrestored { site: String, generation: i64, request: String },
}

impl SiteHold {
    pub(crate) fn parse(text: &str) -> Option<SiteHold> {
        let mut words = text.splitn(3, ' ');
        let (kind, site, rest) = (words.next()?, words.next()?.to_owned(), words.next()?);
        let (number, rest) = rest.split_once(' ')?;
        let number: i64 = number.parse().ok()?;
        match kind {
            "job" => {
                let (namespace, rest) = rest.split_once(' ')?;
                // A request is `operation/id`: it never starts with `uid=`.
                let (job_uid, request) = match rest.strip_prefix("uid=").and_then(|r| r.split_once(' ')) {
                    Some((uid, request)) if !uid.is_empty() => (Some(uid.to_owned()), request),
                    _ => (None, rest),
                };
                let (namespace, request) = (namespace.to_owned(), request.to_owned());
                Some(SiteHold::Job { site, until: number, namespace, request, job_uid })
            }
            "reclone" => Some(SiteHold::Reclone { site, generation: number, request: rest.to_owned() }),
            "unrestored" => Some(SiteHold::Unrestored { site, generation: number, request: rest.to_owned() }),
            _ => None,
        }
    }

    /// The site held.
    pub(crate) fn site(&self) -> &str {
        match self {
            SiteHold::Job { site, .. } | SiteHold::Reclone { site, .. } | SiteHold::Unrestored { site, .. } => site,
        }
    }

    /// The Job of `of_request` on `of_site` as this hold pinned it once it
    /// was made: its uid and namespace (status names a namespace too, but
    /// can be edited).
    pub(crate) fn pinned_job(&self, of_request: &str, of_site: &str) -> Option<(&str, &str)> {
        match self {
            SiteHold::Job { site, request, namespace, job_uid: Some(uid), .. }
                if site == of_site && request == of_request =>
            {
                Some((uid, namespace))
            }
            _ => None,
        }
    }

    /// The site a restore-in-place's Job may be restoring at `now` (a Job
    /// hold of that operation within its bound): reassertion never fences
    /// it meanwhile. The restore writes the data the site will serve, and
    /// may bring the server up writable; clients are on the old primary
    /// until the decision, and the site is fenced like any other once the
    /// Job has ended.
    pub(crate) fn restoring(&self, now: i64, active: &str) -> Option<&str> {
        self.job_of(bloodraven_api::names::site_job::OPERATION_RESTORE_IN_PLACE, now, active)
    }

    /// The site an ordered update's Job may be updating at `now` (a Job
    /// hold of that operation within its bound, not the active site):
    /// reassertion makes it read-only without ending its sessions, which
    /// may be the update's own (`mariadb-upgrade` after a restart that
    /// left the server writable).
    pub(crate) fn updating(&self, now: i64, active: &str) -> Option<&str> {
        self.job_of(bloodraven_api::names::site_job::OPERATION_ORDERED_UPDATE, now, active)
    }

    /// The site of a Job hold of `operation` within its bound at `now`,
    /// other than the active site.
    fn job_of(&self, operation: &str, now: i64, active: &str) -> Option<&str> {
        match self {
            SiteHold::Job { site, until, request, .. }
                if now < *until && site != active && request.split_once('/').is_some_and(|(op, _)| op == operation) =>
            {
                Some(site)
            }
            _ => None,
        }
    }

    /// The request (as recorded in `requests`) the hold belongs to.
    pub(crate) fn request(&self) -> &str {
        match self {
            SiteHold::Job { request, .. }
            | SiteHold::Reclone { request, .. }
            | SiteHold::Unrestored { request, .. } => request,
        }
    }

    /// Why automatic failover waits for it at `now` (Unix seconds), on a
    /// group decided at `active` with `sites`; `None` once it holds nothing.
    pub(crate) fn holds(&self, active: &str, sites: &[&str], now: i64) -> Option<String> {
        match self {
            SiteHold::Job { site, until, request, .. } if site != active && now < *until => Some(format!(
                "{request}: its Job on {site} may run (decision record); {site} is not promoted until the Job ends, at the latest {}",
                k8s_openapi::jiff::Timestamp::from_second(*until).map_or_else(|_| until.to_string(), |t| t.to_string())
            )),
            SiteHold::Reclone { site, generation, request } if site != active && sites.contains(&site.as_str()) => {
                Some(format!(
                    "{request}: {site}'s data predates the primary restored at topologyGeneration {generation} (decision record); it is never promoted until a person re-clones it and marks it done ({})",
                    bloodraven_api::names::RECLONE_DONE_ANNOTATION
                ))
            }
            SiteHold::Unrestored { site, generation, request } if site != active && sites.contains(&site.as_str()) => {
                Some(format!(
                    "{request} failed after its Job ran on {site}: {site} holds whatever the Job left (decision record); it is never promoted nor rejoined as a replica until a person re-clones it from {active} (or restores it again by hand) and annotates the group {}={site}@{generation}",
                    bloodraven_api::names::RECLONE_DONE_ANNOTATION
                ))
            }
            _ => None,
        }
    }

    /// The re-clone mark that releases the hold (`reclone-done`'s value),
    /// for a hold a person ends.
    pub(crate) fn reclone_mark(&self) -> Option<String> {
        match self {
            SiteHold::Reclone { site, generation, .. } | SiteHold::Unrestored { site, generation, .. } => {
                Some(format!("{site}@{generation}"))
            }
            SiteHold::Job { .. } => None,
        }
    }
}

/// Why a new operation (`request`, as recorded) is not admitted now: the
/// record holds a site for another request and that hold still holds
/// (status may say that request is over: status can be edited).
pub(crate) fn foreign_hold(
    rec: Option<&Record>,
    group: &bloodraven_api::v1alpha1::MysqlFailoverGroup,
    request: &str,
) -> Option<String> {
    let rec = rec?;
    let sites: Vec<&str> = group.spec.sites.iter().map(|s| s.name.as_str()).collect();
    let sites = sites.as_slice();
    let hold = rec.site_hold.as_ref().filter(|h| h.request() != request)?;
    let why = hold.holds(&rec.active_site, sites, k8s_openapi::jiff::Timestamp::now().as_second())?;
    Some(format!("the decision record still holds a site for another request: {why}"))
}

/// The hold of `site` in `rec` that still holds at `now` and is not the
/// one a round judged before (`judged`): written since, by an operator
/// that then lost its lease, say. A decision that read the record again
/// right before it acts leaves the site to the next round.
pub(crate) fn held_since<'a>(
    judged: Option<&SiteHold>,
    rec: &'a Record,
    site: &str,
    sites: &[&str],
    now: i64,
) -> Option<&'a SiteHold> {
    let hold = rec.site_hold.as_ref().filter(|h| h.site() == site && Some(*h) != judged)?;
    hold.holds(&rec.active_site, sites, now).map(|_| hold)
}

impl std::fmt::Display for SiteHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SiteHold::Job { site, until, namespace, request, job_uid: None } => {
                write!(f, "job {site} {until} {namespace} {request}")
            }
            SiteHold::Job { site, until, namespace, request, job_uid: Some(uid) } => {
                write!(f, "job {site} {until} {namespace} uid={uid} {request}")
            }
            SiteHold::Reclone { site, generation, request } => write!(f, "reclone {site} {generation} {request}"),
            SiteHold::Unrestored { site, generation, request } => {
                write!(f, "unrestored {site} {generation} {request}")
            }
        }
    }
}

/// The ids of `requests` a record keeps: the newest [`MAX_REQUESTS`],
/// and beyond them any still in flight (`in_flight`'s first words), oldest
/// first: a running request pushed out by the ids taken up after it
/// (planned failovers asked and refused while it runs) would no longer be
/// known as taken up, and would end `Failed` with its Job still running.
fn remembered(requests: &[String], in_flight: &[String]) -> Vec<String> {
    let running = |id: &String| in_flight.iter().any(|t| t.split(' ').next() == Some(id.as_str()));
    let cut = requests.len().saturating_sub(MAX_REQUESTS);
    let (older, newer) = requests.split_at(cut);
    older.iter().filter(|id| running(id)).chain(newer).cloned().collect()
}

/// How many planned-failover request ids a record remembers.
pub(crate) const MAX_REQUESTS: usize = 64;
/// The field manager every record write uses (and integrity checks for).
pub(crate) const RECORD_FIELD_MANAGER: &str = bloodraven_api::names::DECIDER_FIELD_MANAGER;
const DECISION_KEYS: [&str; 8] =
    ["group", "groupUID", "activeSite", "topologyGeneration", "promotionPosition", "requests", "pending", "admitted"];
/// Decision fields added since: in the digest only when present.
const OPTIONAL_KEYS: [&str; 2] = ["siteHold", "inFlight"];

/// The decision fields of a record that a manager other than the operator's
/// owns, as `manager: field, ...` (`None`: all are the operator's).
fn foreign_owners(cm: &ConfigMap) -> Option<String> {
    let mut found = Vec::new();
    for entry in cm.metadata.managed_fields.iter().flatten() {
        let manager = entry.manager.as_deref().unwrap_or("<unnamed>");
        if manager == RECORD_FIELD_MANAGER {
            continue;
        }
        let Some(data) = entry.fields_v1.as_ref().and_then(|f| f.0.get("f:data")).and_then(|d| d.as_object()) else {
            continue;
        };
        for key in DECISION_KEYS.iter().chain(&OPTIONAL_KEYS) {
            if data.contains_key(&format!("f:{key}")) {
                found.push(format!("{}: data.{key}", bloodraven_serving::log::escape(manager, 64)));
            }
        }
    }
    (!found.is_empty()).then(|| found.join(", "))
}

/// Name of the record of `group`: fixed length, whatever the group's name
/// (the webhook reads it too).
pub(crate) use bloodraven_api::names::state::record_name;

/// A stored record ConfigMap as a [`Record`] (digest checked under `key`).
fn decode(key: &[u8], cm: &ConfigMap) -> Record {
    let data = cm.data.clone().unwrap_or_default();
    let tampered = if verifies(key, &data) {
        None
    } else {
        Some(foreign_owners(cm).map_or_else(
            || "its digest is missing or does not verify: written by hand or by an older operator".to_owned(),
            |owners| format!("its digest does not verify; fields owned by {owners}"),
        ))
    };
    let generation = data.get("topologyGeneration").and_then(|g| g.parse().ok()).unwrap_or(0);
    Record {
        active_site: data.get("activeSite").cloned().unwrap_or_default(),
        generation,
        group_uid: data.get("groupUID").cloned().unwrap_or_default(),
        resource_version: cm.metadata.resource_version.clone(),
        // Every generation past bootstrap's (1) was decided by a failover,
        // which records the position it promoted at, empty on a pair that
        // never took a write: that empty position is a position, or a
        // returning primary of a fresh pair would never be repointed.
        promotion_position: data.get("promotionPosition").filter(|p| !p.is_empty() || generation > 1).cloned(),
        requests: data
            .get("requests")
            .map(|r| r.lines().map(str::to_owned).filter(|l| !l.is_empty()).collect())
            .unwrap_or_default(),
        pending: data.get("pending").filter(|p| !p.is_empty()).cloned(),
        admitted: data.get("admitted").filter(|p| !p.is_empty()).cloned(),
        site_hold: data.get("siteHold").and_then(|h| SiteHold::parse(h)),
        in_flight: data
            .get("inFlight")
            .map(|r| r.lines().map(str::to_owned).filter(|l| !l.is_empty()).collect())
            .unwrap_or_default(),
        tampered,
    }
}

/// The cached record `cm` when it may stand for a fresh read (see
/// [`Records::settled`]): `last_written` is the resourceVersion this
/// process last wrote for it, if any.
fn settled(
    key: &[u8],
    cm: &ConfigMap,
    last_written: Option<&str>,
    uid: &str,
    decided: (Option<&str>, Option<i64>),
    operation_running: bool,
) -> Option<Record> {
    let version = cm.metadata.resource_version.as_deref().unwrap_or_default();
    if last_written.is_some_and(|v| v != version) {
        return None;
    }
    let r = decode(key, cm);
    // `admitted` names the last admitted request and stays after it ends;
    // it only matters while a request runs (its engine reads it afresh).
    let quiet = r.tampered.is_none()
        && r.group_uid == uid
        && r.pending.is_none()
        && (r.admitted.is_none() || !operation_running);
    (quiet && decided == (Some(r.active_site.as_str()), Some(r.generation))).then_some(r)
}

/// A watch cache of the decision records of the operator's namespace
/// (label `bloodraven.shipstream.io/record=topology`), so that the
/// steady-state reconcile of a group reads its record without an API
/// request (two record GETs per probe were 400 GET/s at a
/// thousand groups).
///
/// The cache only ever short-cuts the quiet case, see [`Records::settled`];
/// everything that acts (a decision, a planned failover's step, recovery)
/// acts on a record read from the API server (`super::round`), and every
/// record write is a compare-and-swap on the resourceVersion read.
///
/// It also holds what this process knows of the records beyond any one
/// read: the digest key, the resourceVersion it last wrote of each record,
/// and the highest generation it has seen decided of each group. One per
/// process, shared by clones; in memory only (a restarted operator starts
/// again from what it reads).
#[derive(Clone)]
pub(crate) struct Records {
    namespace: String,
    store: Store<ConfigMap>,
    ready: crate::watch_cache::Listed,
    reads: prometheus::IntCounterVec,
    /// The key of record digests ([`load_key`]).
    key: Arc<[u8]>,
    /// resourceVersion of each record (by ConfigMap name) as this process
    /// last wrote it: a cached copy at another version is older than a
    /// write this process already made, and is not used.
    written: Arc<Mutex<HashMap<String, String>>>,
    /// Highest topology generation this process has seen decided, by group
    /// UID (a record it wrote, or a record and status that agreed). A
    /// verified record below it is an older genuine record put back (a
    /// replay, or a restore from a backup): the digest proves who wrote a
    /// record, not when.
    high_water: Arc<Mutex<HashMap<String, i64>>>,
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

/// Locks a map of single inserts and removes: a poisoned lock holds no
/// half-written state, so it is used as it is.
fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Records {
    /// Starts the watch (a spawned task that retries with backoff for the
    /// life of the process) and returns at once; until its first list is in,
    /// every read goes to the API server. `key`: from [`load_key`].
    pub(crate) fn start(
        client: &kube::Client,
        namespace: &str,
        read_counter: prometheus::IntCounterVec,
        key: Vec<u8>,
    ) -> Records {
        let (store, writer) = reflector::store();
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let config = watcher::Config::default().labels(&format!("{RECORD_LABEL}=topology"));
        let stream =
            watcher(api, config).default_backoff().modify(|cm| cm.metadata.managed_fields = None).reflect(writer);
        let ready = crate::watch_cache::spawn(stream, &store, "decision record");
        Records {
            namespace: namespace.to_owned(),
            store,
            ready,
            reads: read_counter,
            key: key.into(),
            written: Arc::default(),
            high_water: Arc::default(),
        }
    }

    /// Notes that `generation` was decided for group `uid`.
    pub(crate) fn note_decided(&self, uid: &str, generation: i64) {
        let mut hw = locked(&self.high_water);
        let e = hw.entry(uid.to_owned()).or_insert(generation);
        *e = (*e).max(generation);
    }

    /// The highest generation this process has seen decided for group `uid`.
    pub(crate) fn high_water(&self, uid: &str) -> Option<i64> {
        locked(&self.high_water).get(uid).copied()
    }

    /// Reads the record of `group` from the API server. `Ok(None)` when
    /// absent; a record of an older group of the same name (another UID)
    /// is returned with its resourceVersion so bootstrap can overwrite it,
    /// and never trusted.
    pub(crate) async fn read(&self, api: &Api<ConfigMap>, group: &str) -> Result<Option<Record>, Error> {
        self.reads.with_label_values(&["api"]).inc();
        let cm = api.get_opt(&record_name(group)).await.map_err(kube_err("read the decision record"))?;
        Ok(cm.as_ref().map(|cm| decode(&self.key, cm)))
    }

    /// The record of `group` (UID `uid`) from the watch cache, when it is
    /// settled: the watch has listed, the cached copy is the last one this
    /// process wrote (or this process wrote none), it verifies, belongs to
    /// `uid`, has no `pending` step and no `admitted` request of a running
    /// planned failover, and shows exactly `decided` (the group's status:
    /// active site and generation). `None` for anything else, including a
    /// cache that lags a write: the caller reads the API server.
    pub(crate) fn settled(
        &self,
        group: &str,
        uid: &str,
        decided: (Option<&str>, Option<i64>),
        operation_running: bool,
    ) -> Option<Record> {
        if !self.ready.get() {
            return None;
        }
        let name = record_name(group);
        let cm = self.store.get(&ObjectRef::new(&name).within(&self.namespace))?;
        let last_written = locked(&self.written).get(&name).cloned();
        let r = settled(&self.key, &cm, last_written.as_deref(), uid, decided, operation_running)?;
        self.reads.with_label_values(&["cache"]).inc();
        Some(r)
    }

    /// Writes a decision: creates the record, or replaces the one read at
    /// `previous.resource_version` (a 409 if anyone wrote since).
    #[allow(clippy::too_many_arguments)] // the decision's fields, each of its own meaning
    pub(super) async fn write(
        &self,
        api: &Api<ConfigMap>,
        group: &str,
        group_uid: &str,
        active_site: &str,
        generation: i64,
        extra: &Extra,
        previous: Option<&Record>,
    ) -> Result<Record, Error> {
        let requests = remembered(&extra.requests, &extra.in_flight);
        let mut data = BTreeMap::from([
            ("group".to_owned(), group.to_owned()),
            ("groupUID".to_owned(), group_uid.to_owned()),
            ("activeSite".to_owned(), active_site.to_owned()),
            ("topologyGeneration".to_owned(), generation.to_string()),
            ("promotionPosition".to_owned(), extra.promotion_position.clone().unwrap_or_default()),
            ("requests".to_owned(), requests.join("\n")),
            ("pending".to_owned(), extra.pending.clone().unwrap_or_default()),
            ("admitted".to_owned(), extra.admitted.clone().unwrap_or_default()),
        ]);
        if let Some(hold) = &extra.site_hold {
            data.insert("siteHold".to_owned(), hold.to_string());
        }
        if !extra.in_flight.is_empty() {
            data.insert("inFlight".to_owned(), extra.in_flight.join("\n"));
        }
        if let Some(d) = digest(&self.key, &data) {
            data.insert("digest".to_owned(), d);
        }
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(record_name(group)),
                resource_version: previous.and_then(|p| p.resource_version.clone()),
                labels: Some(BTreeMap::from([
                    ("app.kubernetes.io/managed-by".to_owned(), "bloodraven-operator".to_owned()),
                    (RECORD_LABEL.to_owned(), "topology".to_owned()),
                ])),
                // `[{}]` resets field ownership (an absent or empty list keeps
                // it), so every field of a record the operator writes is its own.
                managed_fields: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry::default(),
                ]),
                ..ObjectMeta::default()
            },
            data: Some(data),
            ..ConfigMap::default()
        };
        let pp = PostParams { field_manager: Some(RECORD_FIELD_MANAGER.to_owned()), ..PostParams::default() };
        let written = match previous {
            None => api.create(&pp, &cm).await.map_err(kube_err("create the decision record"))?,
            Some(_) => {
                api.replace(&record_name(group), &pp, &cm).await.map_err(kube_err("update the decision record"))?
            }
        };
        if let Some(v) = &written.metadata.resource_version {
            locked(&self.written).insert(record_name(group), v.clone());
        }
        self.note_decided(group_uid, generation);
        // What a read of it gives, exactly (a copy built from `extra` would
        // differ: an empty promotion position past bootstrap is a position).
        Ok(decode(&self.key, &written))
    }

    /// Deletes the record of a deleted group (best effort: a leftover record
    /// of another UID is never trusted).
    pub(crate) async fn delete(&self, api: &Api<ConfigMap>, group: &str) {
        locked(&self.written).remove(&record_name(group));
        match api.delete(&record_name(group), &DeleteParams::default()).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(err) => tracing::warn!(group, error = %err, "failed to delete the decision record"),
        }
    }
}

/// What a decision write records besides the site and generation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Extra {
    /// See [`Record::promotion_position`].
    pub promotion_position: Option<String>,
    /// See [`Record::requests`].
    pub requests: Vec<String>,
    /// See [`Record::pending`].
    pub pending: Option<String>,
    /// See [`Record::admitted`].
    pub admitted: Option<String>,
    /// See [`Record::site_hold`].
    pub site_hold: Option<SiteHold>,
    /// See [`Record::in_flight`].
    pub in_flight: Vec<String>,
}

impl Record {
    /// What this record carries over to the next write.
    pub(crate) fn extra(&self) -> Extra {
        Extra {
            promotion_position: self.promotion_position.clone(),
            requests: self.requests.clone(),
            pending: self.pending.clone(),
            admitted: self.admitted.clone(),
            site_hold: self.site_hold.clone(),
            in_flight: self.in_flight.clone(),
        }
    }
}

/// Deletes every decision record whose group no longer exists with the UID
/// it records (`live`: name → UID of every group, listed from `listed_at`
/// on; younger records are left for the next sweep). Returns how many.
pub(crate) async fn sweep<S: std::hash::BuildHasher>(
    api: &Api<ConfigMap>,
    live: &std::collections::HashMap<String, String, S>,
    listed_at: k8s_openapi::jiff::Timestamp,
) -> Result<usize, Error> {
    use crate::lease::store::created_before;
    let lp = kube::api::ListParams::default().labels(&format!("{RECORD_LABEL}=topology"));
    let list = api.list(&lp).await.map_err(kube_err("list decision records"))?;
    let mut deleted = 0;
    for cm in list.items.iter().filter(|c| created_before(c.metadata.creation_timestamp.as_ref(), listed_at)) {
        let data = cm.data.clone().unwrap_or_default();
        let (Some(group), Some(uid), Some(name)) = (data.get("group"), data.get("groupUID"), cm.metadata.name.as_ref())
        else {
            continue;
        };
        // A record is deleted by its own name: one hand-made under another
        // name must not take the group's real record with it.
        if live.get(group) != Some(uid) || *name != record_name(group) {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) | Err(kube::Error::Api(_)) => deleted += 1,
                Err(err) => return Err(kube_err("delete a stale decision record")(err)),
            }
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = &[7; 32];

    #[test]
    fn record_names_are_short_and_distinct() {
        let long = "g".repeat(253);
        assert_eq!(record_name(&long).len(), "bloodraven-topology-".len() + 16);
        assert_ne!(record_name("a"), record_name("b"));
        assert_eq!(record_name("playground"), record_name("playground"));
    }

    /// A record ConfigMap as `write` stores it, at resourceVersion `rv`,
    /// with `edit` applied to its data after the digest.
    fn stored(rv: &str, pending: &str, edit: impl FnOnce(&mut BTreeMap<String, String>)) -> ConfigMap {
        let mut data = BTreeMap::from([
            ("group".to_owned(), "g".to_owned()),
            ("groupUID".to_owned(), "uid-1".to_owned()),
            ("activeSite".to_owned(), "iad".to_owned()),
            ("topologyGeneration".to_owned(), "3".to_owned()),
            ("promotionPosition".to_owned(), String::new()),
            ("requests".to_owned(), String::new()),
            ("pending".to_owned(), pending.to_owned()),
            ("admitted".to_owned(), String::new()),
        ]);
        let d = digest(KEY, &data).unwrap();
        data.insert("digest".to_owned(), d);
        edit(&mut data);
        ConfigMap {
            metadata: ObjectMeta { resource_version: Some(rv.to_owned()), ..ObjectMeta::default() },
            data: Some(data),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn the_last_requests_keep_every_one_still_in_flight() {
        let ids: Vec<String> = (0..70).map(|i| format!("p{i}")).collect();
        let kept = remembered(&ids, &[]);
        assert_eq!((kept.len(), kept[0].as_str()), (MAX_REQUESTS, "p6"));
        let running = ["ordered-update/u1 iad pdx 1 jobs 600 false".to_owned(), "p2 pdx iad 1".to_owned()];
        let mut ids = ids;
        ids.insert(3, "ordered-update/u1".into());
        let kept = remembered(&ids, &running);
        assert_eq!(kept.len(), MAX_REQUESTS + 2);
        assert_eq!(&kept[..2], ["p2", "ordered-update/u1"], "oldest first");
        assert_eq!(kept.last().map(String::as_str), Some("p69"));
    }

    #[test]
    fn only_a_restore_jobs_site_is_spared_and_only_within_its_bound() {
        let job = |request: &str| SiteHold::Job {
            site: "pdx".into(),
            until: 2_000,
            namespace: "jobs".into(),
            request: request.into(),
            job_uid: None,
        };
        assert_eq!(job("restore-in-place/r1").restoring(1_000, "iad"), Some("pdx"));
        assert_eq!(job("restore-in-place/r1").restoring(2_000, "iad"), None, "past its bound");
        assert_eq!(job("restore-in-place/r1").restoring(1_000, "pdx"), None, "never the decided primary");
        assert_eq!(job("ordered-update/u1").restoring(1_000, "iad"), None, "an update's standby is fenced");
        let reclone = SiteHold::Reclone { site: "iad".into(), generation: 3, request: "restore-in-place/r1".into() };
        assert_eq!(reclone.restoring(1_000, "pdx"), None);
        // An update's site keeps its sessions (made read-only only), within the same bound.
        assert_eq!(job("ordered-update/u1").updating(1_000, "iad"), Some("pdx"));
        assert_eq!(job("ordered-update/u1").updating(2_000, "iad"), None, "past its bound");
        assert_eq!(job("ordered-update/u1").updating(1_000, "pdx"), None, "never the decided primary");
        assert_eq!(job("restore-in-place/r1").updating(1_000, "iad"), None);
        assert_eq!(job("planned/u1").updating(1_000, "iad"), None);
        assert_eq!(reclone.updating(1_000, "pdx"), None);
    }

    #[test]
    fn a_hold_written_after_the_round_judged_the_site_is_seen_by_the_decision() {
        let job = |until| SiteHold::Job {
            site: "pdx".into(),
            until,
            namespace: "jobs".into(),
            request: "ordered-update/u1".into(),
            job_uid: None,
        };
        let rec = |hold: Option<SiteHold>| Record { active_site: "iad".into(), site_hold: hold, ..Record::default() };
        let sites = ["iad", "pdx"];
        let now = 1_000;
        let fresh = rec(Some(job(2_000)));
        assert_eq!(held_since(None, &fresh, "pdx", &sites, now), fresh.site_hold.as_ref(), "new since");
        assert_eq!(held_since(Some(&job(2_000)), &fresh, "pdx", &sites, now), None, "judged already (its Job ended)");
        assert_eq!(held_since(None, &fresh, "iad", &sites, now), None, "another site");
        assert_eq!(held_since(None, &rec(Some(job(900))), "pdx", &sites, now), None, "past its bound");
        assert_eq!(held_since(None, &rec(None), "pdx", &sites, now), None);
        let reclone = rec(Some(SiteHold::Reclone { site: "pdx".into(), generation: 3, request: "r".into() }));
        assert!(held_since(Some(&job(2_000)), &reclone, "pdx", &sites, now).is_some(), "another hold since");
    }

    #[test]
    fn the_request_in_flight_is_in_the_digest_once_written() {
        let terms = "ordered-update/u1 iad pdx 4 jobs 600 false";
        let with = |edit: fn(&mut BTreeMap<String, String>)| {
            stored("10", "", |d| {
                d.insert("inFlight".to_owned(), "ordered-update/u1 iad pdx 4 jobs 600 false".to_owned());
                let digest = digest(KEY, d).unwrap();
                d.insert("digest".to_owned(), digest);
                edit(d);
            })
        };
        let written = decode(KEY, &with(|_| {}));
        assert_eq!((written.tampered.as_deref(), written.in_flight.clone()), (None, vec![terms.to_owned()]));
        assert_eq!(written.extra().in_flight, [terms], "carried over to the next write");
        for edit in [
            |d: &mut BTreeMap<String, String>| {
                d.remove("inFlight");
            },
            |d: &mut BTreeMap<String, String>| {
                d.insert("inFlight".to_owned(), "ordered-update/u1 pdx iad 4 jobs 600 false".to_owned());
            },
        ] {
            assert!(decode(KEY, &with(edit)).tampered.is_some());
        }
        assert!(decode(KEY, &stored("10", "", |_| {})).in_flight.is_empty(), "stored before the key existed");
    }

    #[test]
    fn a_site_hold_is_in_the_digest_once_written_and_older_records_still_verify() {
        // Stored before the key existed: verifies, holds nothing.
        let older = decode(KEY, &stored("10", "", |_| {}));
        assert_eq!((older.tampered.as_deref(), older.site_hold.as_ref()), (None, None));
        let hold = SiteHold::Reclone { site: "iad".into(), generation: 3, request: "restore-in-place/r1".into() };
        let with_hold = |edit: fn(&mut BTreeMap<String, String>)| {
            stored("10", "", |d| {
                d.insert("siteHold".to_owned(), "reclone iad 3 restore-in-place/r1".to_owned());
                let digest = digest(KEY, d).unwrap();
                d.insert("digest".to_owned(), digest);
                edit(d);
            })
        };
        let written = decode(KEY, &with_hold(|_| {}));
        assert_eq!((written.tampered.as_deref(), written.site_hold.as_ref()), (None, Some(&hold)));
        // Removed or changed by hand: the digest no longer verifies.
        for edit in [
            |d: &mut BTreeMap<String, String>| {
                d.remove("siteHold");
            },
            |d: &mut BTreeMap<String, String>| {
                d.insert("siteHold".to_owned(), String::new());
            },
            |d: &mut BTreeMap<String, String>| {
                d.insert("siteHold".to_owned(), "reclone iad 2 restore-in-place/r1".to_owned());
            },
        ] {
            assert!(decode(KEY, &with_hold(edit)).tampered.is_some());
        }
        // The text round-trips; anything else is no hold.
        let job = SiteHold::Job {
            site: "pdx".into(),
            until: 1_700_000_000,
            namespace: "jobs".into(),
            request: "ordered-update/u 1".into(),
            job_uid: None,
        };
        assert_eq!(SiteHold::parse(&job.to_string()), Some(job.clone()));
        let mut pinned = job;
        if let SiteHold::Job { job_uid, .. } = &mut pinned {
            *job_uid = Some("0b7e-11".into());
        }
        assert_eq!(pinned.to_string(), "job pdx 1700000000 jobs uid=0b7e-11 ordered-update/u 1");
        assert_eq!(SiteHold::parse(&pinned.to_string()), Some(pinned));
        // Words taken from status that would not read back as written
        // (the operator refuses to store them: `remember_site_hold`).
        for (site, namespace) in [("pdx", "x uid=bogus y"), ("p dx", "jobs")] {
            let forged = SiteHold::Job {
                site: site.into(),
                until: 1,
                namespace: namespace.into(),
                request: "ordered-update/u".into(),
                job_uid: None,
            };
            assert_ne!(SiteHold::parse(&forged.to_string()), Some(forged.clone()), "{forged}");
        }
        // Stored before the Job was pinned: no uid.
        assert!(matches!(
            SiteHold::parse("job pdx 1 jobs restore-in-place/r"),
            Some(SiteHold::Job { job_uid: None, ref request, .. }) if request == "restore-in-place/r"
        ));
        for bad in [
            "",
            "job pdx",
            "job pdx 1 jobs",
            "job pdx soon jobs r",
            "hold pdx 1 r",
            "reclone iad x r",
            "unrestored pdx",
        ] {
            assert_eq!(SiteHold::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_site_hold_holds_its_site_until_it_ends() {
        let job = SiteHold::Job {
            site: "pdx".into(),
            until: 100,
            namespace: "jobs".into(),
            request: "ordered-update/u".into(),
            job_uid: None,
        };
        let sites = ["iad", "pdx"];
        assert!(job.holds("iad", &sites, 99).is_some());
        assert!(job.holds("iad", &sites, 100).is_none(), "past the Job's deadline and grace");
        assert!(job.holds("pdx", &sites, 50).is_none(), "the decided primary is never held");
        let reclone = SiteHold::Reclone { site: "iad".into(), generation: 3, request: "restore-in-place/r".into() };
        assert!(reclone.holds("pdx", &sites, i64::MAX).is_some(), "no deadline: a person ends it");
        assert!(reclone.holds("iad", &sites, 0).is_none());
        assert!(reclone.holds("pdx", &["pdx", "sfo"], 0).is_none(), "the site left spec.sites");
        // A restore that failed after its Job ran: held as a re-clone is,
        // released by the mark at the generation it failed at.
        let unrestored =
            SiteHold::Unrestored { site: "pdx".into(), generation: 4, request: "restore-in-place/w".into() };
        assert_eq!(unrestored.to_string(), "unrestored pdx 4 restore-in-place/w");
        assert_eq!(SiteHold::parse(&unrestored.to_string()), Some(unrestored.clone()));
        let why = unrestored.holds("iad", &sites, i64::MAX).unwrap();
        assert!(why.contains("reclone-done=pdx@4") && why.contains("failed after its Job ran"), "{why}");
        assert!(unrestored.holds("pdx", &sites, 0).is_none(), "the decided primary is never held");
        assert_eq!(unrestored.reclone_mark().as_deref(), Some("pdx@4"));
        assert_eq!(job.reclone_mark(), None);
    }

    #[test]
    fn an_empty_promotion_position_past_bootstrap_is_a_position() {
        // Generation 3 with an empty position: a failover of a pair that never took a write.
        assert_eq!(decode(KEY, &stored("10", "", |_| {})).promotion_position.as_deref(), Some(""));
        let bootstrapped = stored("10", "", |d| {
            d.insert("topologyGeneration".to_owned(), "1".to_owned());
        });
        assert_eq!(decode(KEY, &bootstrapped).promotion_position, None, "bootstrap: no failover yet");
    }

    #[test]
    fn only_a_settled_cached_record_stands_for_a_read() {
        let at = (Some("iad"), Some(3));
        let plain = stored("10", "", |_| {});
        assert!(settled(KEY, &plain, None, "uid-1", at, false).is_some(), "settled, and this process never wrote it");
        assert!(settled(KEY, &plain, Some("10"), "uid-1", at, false).is_some(), "the copy this process wrote last");
        // Each of these must go to the API server instead.
        assert!(settled(KEY, &plain, Some("11"), "uid-1", at, false).is_none(), "older than this process's last write");
        assert!(settled(KEY, &plain, None, "uid-2", at, false).is_none(), "another group of the same name");
        assert!(
            settled(KEY, &plain, None, "uid-1", (Some("pdx"), Some(3)), false).is_none(),
            "status shows another site"
        );
        assert!(
            settled(KEY, &plain, None, "uid-1", (Some("iad"), Some(4)), false).is_none(),
            "status shows another generation"
        );
        assert!(settled(KEY, &plain, None, "uid-1", (None, None), false).is_none(), "status shows no decision");
        assert!(
            settled(KEY, &stored("10", "promote", |_| {}), None, "uid-1", at, false).is_none(),
            "a step is pending"
        );
        let admitted = stored("10", "", |d| {
            d.insert("admitted".to_owned(), "r1".to_owned());
        });
        assert!(settled(KEY, &admitted, None, "uid-1", at, false).is_none(), "edited after the digest");
        let edited = stored("10", "", |d| {
            d.insert("topologyGeneration".to_owned(), "9".to_owned());
        });
        assert!(
            settled(KEY, &edited, None, "uid-1", (Some("iad"), Some(9)), false).is_none(),
            "a hand edit never stands"
        );
        // A request admitted by a planned failover: settled once it ended, never while it runs.
        let mut genuine = stored("10", "", |_| {});
        let mut data = genuine.data.take().unwrap();
        data.insert("admitted".to_owned(), "r1 pdx iad".to_owned());
        let d = digest(KEY, &data).unwrap();
        data.insert("digest".to_owned(), d);
        genuine.data = Some(data);
        assert!(settled(KEY, &genuine, None, "uid-1", at, false).is_some(), "the request ended");
        assert!(settled(KEY, &genuine, None, "uid-1", at, true).is_none(), "the request runs");
    }
}
