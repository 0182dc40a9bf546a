//! Tolerant reading of Bloodraven's custom resources: every watch, list and
//! get of a MysqlFailoverGroup or a MysqlDatabase in the operator that reads
//! a spec or a status goes through here, so that one stored object that does not decode into the
//! operator's types (what a CRD downgrade, or an object written while the
//! schema was looser, leaves behind) is reported on that object and skipped,
//! and never stops the others (docs/runbook.md, "InvalidObject").
//!
//! Model:
//! - Watches and gets read `DynamicObject`s (which always decode: the API
//!   server validates metadata) and decode each object on its own with
//!   `serde_path_to_error` ([`decode`]). Decoded events feed the reflector
//!   stores and controllers exactly as kube's typed watcher would
//!   ([`stream`]); a bad object is left out of the store.
//! - A watch that owns its kind (the controller's own watch) reports what it
//!   finds to the [`report::Reporter`]: the leader writes `Ready=False`,
//!   reason `InvalidObject`, with the field's JSON path, on the object's
//!   status, and publishes one Warning Event (reason `InvalidObject`) —
//!   again only when the error changes, or after [`report::EVENT_REPEAT`].
//!   Other watches of the kind (the deploy API's caches) skip bad objects
//!   silently, so each bad object is reported once per process.
//! - The one watch that does not come here is the database controller's
//!   metadata-only watch of groups: it reads names alone, which always
//!   decode. Writes (status applies, patches) still decode their response
//!   into the typed object; they only ever write objects that decoded a
//!   moment before.
//! - Log lines, conditions and Events carry the path and serde's complaint,
//!   bounded and escaped ([`decode::bounded`]); never the object or a list.
//! - `bloodraven_decode_errors_total{kind}` counts failed decodes by owning
//!   watches and by point reads; `bloodraven_undecodable_objects{kind}` is
//!   the number of objects not decoding now (alert on it).

pub(crate) mod decode;
pub(crate) mod raw;
pub(crate) mod report;
pub(crate) mod stream;

use std::fmt::Debug;

use crate::events::Recorder;
use bloodraven_api::names::cached;
use bloodraven_api::v1alpha1::{MysqlDatabase, MysqlFailoverGroup};
use futures::{Stream, StreamExt, future};
use kube::api::ApiResource;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

pub(crate) use self::decode::DecodeError;
pub(crate) use self::report::Reporter;
use self::stream::Tolerance;
use crate::leader::Leadership;
use crate::metrics::{Metrics, MetricsError};

/// Condition and Event reason for an object that does not decode.
pub(crate) const INVALID_OBJECT: &str = bloodraven_api::v1alpha1::reason::INVALID_OBJECT;

/// The kinds the operator watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// `MysqlFailoverGroup` (cluster-scoped).
    FailoverGroup,
    /// `MysqlDatabase` (namespaced).
    Database,
}

impl Kind {
    /// The kind's name, also the `kind` label of the metrics.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Kind::FailoverGroup => "MysqlFailoverGroup",
            Kind::Database => "MysqlDatabase",
        }
    }

    /// Group, version, kind and plural of the kind.
    pub(crate) fn api_resource(self) -> ApiResource {
        match self {
            Kind::FailoverGroup => ApiResource::erase::<MysqlFailoverGroup>(&()),
            Kind::Database => ApiResource::erase::<MysqlDatabase>(&()),
        }
    }
}

/// A custom resource the operator reads tolerantly.
pub(crate) trait Watched:
    Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug + Send + Sync + 'static
{
    /// Which kind it is.
    const KIND: Kind;
}

impl Watched for MysqlFailoverGroup {
    const KIND: Kind = Kind::FailoverGroup;
}

impl Watched for MysqlDatabase {
    const KIND: Kind = Kind::Database;
}

/// Errors of a tolerant point read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The API call failed.
    #[error("failed to read the object: {0}")]
    Kube(#[from] kube::Error),
    /// The object exists but does not decode.
    #[error("the stored object does not decode: {0}")]
    Invalid(DecodeError),
}

/// Whether a watch reports the bad objects it finds (the kind's owning
/// controller does) or only skips them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Findings {
    /// Report them: condition, Event, metrics, one log line per new error.
    Report,
    /// Skip them silently (a second watch of a kind another watch reports).
    Skip,
}

/// The tolerant reader: a client and the reporter. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Tolerant {
    client: Client,
    reporter: Reporter,
}

impl std::fmt::Debug for Tolerant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tolerant").field("reporter", &self.reporter).finish_non_exhaustive()
    }
}

impl Tolerant {
    /// A reader with `client`, reporting to `reporter`.
    pub(crate) fn new(client: Client, reporter: Reporter) -> Self {
        Tolerant { client, reporter }
    }

    /// A reader whose reporter writes with `recorder` while `leadership`
    /// holds, its metrics registered in `metrics`; spawns the reporter's
    /// loop, which ends when `shutdown` resolves.
    pub(crate) fn start(
        client: &Client,
        recorder: &Recorder,
        leadership: &Leadership,
        metrics: &Metrics,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<Self, MetricsError> {
        let reporter = Reporter::new(client.clone(), recorder.clone(), leadership.clone(), metrics)?;
        tokio::spawn(reporter.clone().run(shutdown));
        Ok(Tolerant::new(client.clone(), reporter))
    }

    /// Watches every `K` matching `config`, with kube's default backoff,
    /// decoding each object on its own. Keeps `store` (a reflector writer and
    /// its reader) in step when given; yields the decoded events. Watch
    /// errors (API server unreachable, RBAC) are passed on as kube's watcher
    /// would; objects that do not decode never are.
    pub(crate) fn watch<K: Watched>(
        &self,
        config: watcher::Config,
        store: Option<(Writer<K>, Store<K>)>,
        findings: Findings,
    ) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K> {
        // Raw bodies: one object nested too deeply fails alone, not the list (`raw`).
        let api: Api<raw::RawObject> = Api::all_with(self.client.clone(), &K::KIND.api_resource());
        let mut tolerance = Tolerance::<K>::new(store);
        let reporter = self.reporter.clone();
        let mut found = Vec::new();
        watcher::watcher(api, config.page_size(cached::LIST_PAGE)).default_backoff().filter_map(move |event| {
            let out = match event {
                Ok(event) => {
                    // What is never read of a watched object is dropped
                    // before it is cached (`names::cached`): managedFields,
                    // often its largest part (a thousand groups are held by
                    // two caches), and what tenants may write at will on a
                    // MysqlDatabase (annotations, labels).
                    let slim = |o: raw::RawObject| {
                        let mut o = o.parsed();
                        let (annotations, labels): (&[&str], fn(&str) -> bool) = match K::KIND {
                            Kind::FailoverGroup => (&cached::GROUP_ANNOTATIONS, cached::all_labels),
                            Kind::Database => (&[], cached::no_labels),
                        };
                        cached::trim(&mut o.metadata, annotations, labels);
                        o
                    };
                    let event = match event {
                        watcher::Event::Apply(o) => watcher::Event::Apply(slim(o)),
                        watcher::Event::InitApply(o) => watcher::Event::InitApply(slim(o)),
                        watcher::Event::Delete(o) => watcher::Event::Delete(slim(o)),
                        watcher::Event::Init => watcher::Event::Init,
                        watcher::Event::InitDone => watcher::Event::InitDone,
                    };
                    let out = tolerance.step(event, &mut found);
                    if findings == Findings::Report {
                        reporter.learn(found.drain(..));
                    } else {
                        found.clear();
                    }
                    out.map(Ok)
                }
                Err(err) => Some(Err(err)),
            };
            future::ready(out)
        })
    }

    /// Reads one `K` (`namespace` `None` for a cluster-scoped kind): `None`
    /// when it does not exist, [`ReadError::Invalid`] when it does not
    /// decode (counted; the owning watch reports it on the object).
    pub(crate) async fn get<K: Watched>(&self, namespace: Option<&str>, name: &str) -> Result<Option<K>, ReadError> {
        let ar = K::KIND.api_resource();
        let api: Api<raw::RawObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let Some(obj) = api.get_opt(name).await?.map(|o| o.parsed()) else { return Ok(None) };
        match decode::decode::<K>(&obj) {
            Ok(k) => Ok(Some(k)),
            Err(err) => {
                self.reporter.count(K::KIND);
                tracing::debug!(kind = K::KIND.as_str(), name, error = %err, "read an object that does not decode");
                Err(ReadError::Invalid(err))
            }
        }
    }
}
