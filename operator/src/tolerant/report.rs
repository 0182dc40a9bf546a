//! Reporting objects that do not decode, on the objects themselves (leader
//! only): `Ready=False`, reason `InvalidObject`, with the JSON path of the
//! offending field, written to the status subresource; one Warning Event
//! with the same reason; metrics; one short log line per new error.
//!
//! Model:
//! - Owning watches send what they find ([`Reporter::learn`]); a map keyed by
//!   kind/namespace/name holds each object not decoding now.
//! - A loop ([`Reporter::run`]) writes, when this process is the leader: the
//!   condition when the object's stored status does not already carry it
//!   (so the operator's own write, seen again by the watch, writes nothing),
//!   and the Event when this process has not published this error text for
//!   this object, or did so more than [`EVENT_REPEAT`] ago. It wakes on news,
//!   on each leadership acquisition, and every [`RETRY`] for failed writes.
//! - The status write is a server-side apply under the observer's field
//!   manager, with the same fields the reconciler writes, so that once the
//!   object is fixed the reconciler's next apply replaces every field this
//!   one set. Kubernetes 1.35 validates a status write against the whole
//!   object but ratchets unchanged fields (CRD validation ratcheting, GA in
//!   1.33), so an invalid but unchanged spec does not refuse it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::events::Recorder;
use bloodraven_api::names::OBSERVER_FIELD_MANAGER;
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Api, Client};
use prometheus::{IntCounterVec, IntGaugeVec, Opts};
use serde_json::json;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::stream::{Bad, Finding, Key};
use super::{INVALID_OBJECT, Kind};
use crate::controller::conditions::{Computed, materialize};
use crate::leader::Leadership;
use crate::metrics::{Metrics, MetricsError};

/// How long before the same Event about the same object is published again.
pub(crate) const EVENT_REPEAT: Duration = Duration::from_secs(3600);
/// How often failed condition or Event writes are retried.
pub(crate) const RETRY: Duration = Duration::from_secs(15);

/// One object not decoding now, and what this process did about it.
#[derive(Debug)]
struct Entry {
    bad: Bad,
    /// The error text of the last Event this process published, and when.
    event: Option<(String, Instant)>,
}

/// Registers the reporter's metrics in `metrics`,
/// `bloodraven_decode_errors_total{kind}` and
/// `bloodraven_undecodable_objects{kind}`, each with a series per kind at 0
/// so that alerts see them before the first error.
pub(crate) fn register_metrics(metrics: &Metrics) -> Result<(IntCounterVec, IntGaugeVec), MetricsError> {
    let decode_errors_total = IntCounterVec::new(
        Opts::new(
            "bloodraven_decode_errors_total",
            "Stored objects that failed to decode into the operator's types, by kind (each failed decode)",
        ),
        &["kind"],
    )?;
    let undecodable_objects = IntGaugeVec::new(
        Opts::new("bloodraven_undecodable_objects", "Stored objects of the kind that do not decode now"),
        &["kind"],
    )?;
    metrics.register(Box::new(decode_errors_total.clone()))?;
    metrics.register(Box::new(undecodable_objects.clone()))?;
    for kind in [Kind::FailoverGroup, Kind::Database] {
        undecodable_objects.with_label_values(&[kind.as_str()]).set(0);
        decode_errors_total.with_label_values(&[kind.as_str()]);
    }
    Ok((decode_errors_total, undecodable_objects))
}

/// Collects bad objects from the owning watches and reports them.
#[derive(Clone)]
pub(crate) struct Reporter {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    recorder: Recorder,
    leadership: Leadership,
    entries: Mutex<HashMap<Key, Entry>>,
    news: Notify,
    decode_errors_total: IntCounterVec,
    undecodable_objects: IntGaugeVec,
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter").finish_non_exhaustive()
    }
}

impl Reporter {
    /// A reporter writing with `client` and `recorder` while `leadership`
    /// holds; registers its metrics in `metrics`.
    pub(crate) fn new(
        client: Client,
        recorder: Recorder,
        leadership: Leadership,
        metrics: &Metrics,
    ) -> Result<Self, MetricsError> {
        let (decode_errors_total, undecodable_objects) = register_metrics(metrics)?;
        let inner = Inner {
            client,
            recorder,
            leadership,
            entries: Mutex::default(),
            news: Notify::new(),
            decode_errors_total,
            undecodable_objects,
        };
        Ok(Reporter { inner: Arc::new(inner) })
    }

    /// Counts one failed decode of `kind`.
    pub(crate) fn count(&self, kind: Kind) {
        self.inner.decode_errors_total.with_label_values(&[kind.as_str()]).inc();
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.inner.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes in what an owning watch found.
    pub(crate) fn learn(&self, findings: impl IntoIterator<Item = Finding>) {
        let mut news = false;
        {
            let mut entries = self.entries();
            for finding in findings {
                match finding {
                    Finding::Bad(bad) => {
                        self.count(bad.key.kind);
                        let changed = entries.get(&bad.key).is_none_or(|e| e.bad.error != bad.error);
                        if changed {
                            let k = &bad.key;
                            tracing::warn!(
                                kind = k.kind.as_str(),
                                namespace = k.namespace.as_deref().unwrap_or(""),
                                name = %k.name,
                                error = %bad.error,
                                "stored object does not decode: skipped until it is fixed"
                            );
                        }
                        news |= changed || !bad.reported();
                        let bad = *bad;
                        match entries.get_mut(&bad.key) {
                            Some(entry) => entry.bad = bad,
                            None => {
                                entries.insert(bad.key.clone(), Entry { bad, event: None });
                            }
                        }
                    }
                    Finding::Decoded(key) | Finding::Gone(key) => {
                        if entries.remove(&key).is_some() {
                            tracing::info!(
                                kind = key.kind.as_str(),
                                namespace = key.namespace.as_deref().unwrap_or(""),
                                name = %key.name,
                                "object decodes again, or is gone"
                            );
                        }
                    }
                }
            }
            for kind in [Kind::FailoverGroup, Kind::Database] {
                let n = entries.keys().filter(|k| k.kind == kind).count();
                self.inner.undecodable_objects.with_label_values(&[kind.as_str()]).set(n as i64);
            }
        }
        if news {
            self.inner.news.notify_one();
        }
    }

    /// Reports bad objects while this process is the leader, until `shutdown`.
    pub(crate) async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send) {
        let mut acquisitions = self.inner.leadership.acquisitions().boxed();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                () = self.inner.news.notified() => {}
                _ = acquisitions.next() => {}
                () = tokio::time::sleep(RETRY) => {}
            }
            self.report_due().await;
        }
    }

    /// One pass: every entry whose condition or Event is due.
    async fn report_due(&self) {
        if !self.inner.leadership.is_leader() {
            return;
        }
        let now = Instant::now();
        let due: Vec<(Bad, bool)> = self
            .entries()
            .values()
            .filter_map(|e| {
                let event_due = e
                    .event
                    .as_ref()
                    .is_none_or(|(text, at)| *text != e.bad.error.text || now.duration_since(*at) >= EVENT_REPEAT);
                (event_due || !e.bad.reported()).then(|| (e.bad.clone(), event_due))
            })
            .collect();
        for (bad, event_due) in due {
            if !bad.reported() {
                self.write_condition(&bad).await;
            }
            if event_due
                && self.publish(&bad).await
                && let Some(entry) = self.entries().get_mut(&bad.key)
            {
                entry.event = Some((bad.error.text.clone(), Instant::now()));
            }
        }
    }

    async fn write_condition(&self, bad: &Bad) {
        let key = &bad.key;
        let ar = key.kind.api_resource();
        // Raw: the response echoes the stored object, which may not parse (`raw`).
        let api: Api<super::raw::RawObject> = match &key.namespace {
            Some(ns) => Api::namespaced_with(self.inner.client.clone(), ns, &ar),
            None => Api::all_with(self.inner.client.clone(), &ar),
        };
        let patch = status_patch(bad, Timestamp::now());
        if !self.inner.leadership.is_leader() {
            return;
        }
        let params = PatchParams::apply(OBSERVER_FIELD_MANAGER).force();
        let mut written = api.patch_status(&key.name, &params, &Patch::Apply(&patch)).await;
        if let Err(kube::Error::Api(s)) = &written
            && (s.code == 500 || s.code == 422)
        {
            // Server-side apply must first convert the stored object to its
            // schema's types, which fails for a field of the wrong JSON type
            // (`port: "3306"`) or one the apply would drop; a merge patch of
            // the conditions alone needs no such conversion.
            let conditions = json!({ "status": { "conditions": patch["status"]["conditions"].clone() } });
            written = api.patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&conditions)).await;
        }
        match written {
            Ok(_) => {
                tracing::info!(kind = key.kind.as_str(), namespace = key.namespace.as_deref().unwrap_or(""), name = %key.name, "reported the decode error on the object's status");
                if let Some(entry) = self.entries().get_mut(key) {
                    entry.bad.conditions =
                        serde_json::from_value(patch["status"]["conditions"].clone()).unwrap_or_default();
                }
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(err) => {
                let error = super::decode::bounded(&err.to_string(), 512);
                tracing::warn!(kind = key.kind.as_str(), namespace = key.namespace.as_deref().unwrap_or(""), name = %key.name, error = %error, "failed to write the InvalidObject condition; retrying");
            }
        }
    }

    /// Publishes the Warning Event; returns whether it was published.
    async fn publish(&self, bad: &Bad) -> bool {
        if !self.inner.leadership.is_leader() {
            return false;
        }
        let event = Event {
            type_: EventType::Warning,
            reason: INVALID_OBJECT.to_owned(),
            note: Some(message(bad)),
            action: "Decode".to_owned(),
            secondary: None,
        };
        match self.inner.recorder.publish(&event, &bad.reference).await {
            Ok(()) => true,
            Err(err) => {
                let key = &bad.key;
                let error = super::decode::bounded(&err.to_string(), 512);
                tracing::warn!(kind = key.kind.as_str(), namespace = key.namespace.as_deref().unwrap_or(""), name = %key.name, error = %error, "failed to publish the InvalidObject event; retrying");
                false
            }
        }
    }
}

/// The condition message and Event note: the error (path and complaint),
/// then what to do. At most about 600 bytes (Event notes allow 1 KiB).
pub(crate) fn message(bad: &Bad) -> String {
    format!(
        "{}; the stored {} does not match the operator's types (left by a CRD downgrade or a looser schema), so the operator skips it: fix that field",
        bad.error.text,
        bad.key.kind.as_str()
    )
}

/// The server-side apply body for `bad`'s status: `Ready=False`,
/// `InvalidObject`, and for a group also `stable: false` with
/// `unstableReason: InvalidObject` (the deploy API must not read it as
/// stable). The same fields the reconcilers apply, so their next apply
/// after a fix takes every one of them back.
pub(crate) fn status_patch(bad: &Bad, now: Timestamp) -> serde_json::Value {
    let ready = Computed::flag("Ready", false, INVALID_OBJECT, message(bad));
    let conditions = materialize(&bad.conditions, &[ready], bad.generation, now);
    let ar = bad.key.kind.api_resource();
    let mut status = json!({ "conditions": conditions, "observedGeneration": bad.generation });
    if bad.key.kind == Kind::FailoverGroup {
        status["stable"] = json!(false);
        status["unstableReason"] = json!(INVALID_OBJECT);
    }
    json!({ "apiVersion": ar.api_version, "kind": ar.kind, "status": status })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tolerant::decode::DecodeError;

    fn bad(kind: Kind) -> Bad {
        Bad {
            key: Key { kind, namespace: None, name: "g".into() },
            generation: Some(3),
            reference: k8s_openapi::api::core::v1::ObjectReference::default(),
            error: DecodeError {
                path: "spec.sites[0].port".into(),
                text: "spec.sites[0].port: invalid value: integer `70000`, expected u16".into(),
            },
            conditions: Vec::new(),
        }
    }

    #[test]
    fn the_status_patch_names_the_field_and_marks_a_group_unstable() {
        let now = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let p = status_patch(&bad(Kind::FailoverGroup), now);
        assert_eq!(p["kind"], "MysqlFailoverGroup");
        assert_eq!(p["apiVersion"], "bloodraven.shipstream.io/v1alpha1");
        let c = &p["status"]["conditions"][0];
        assert_eq!(
            (c["type"].as_str(), c["status"].as_str(), c["reason"].as_str()),
            (Some("Ready"), Some("False"), Some("InvalidObject"))
        );
        assert!(
            c["message"]
                .as_str()
                .unwrap_or_default()
                .starts_with("spec.sites[0].port: invalid value: integer `70000`, expected u16; ")
        );
        assert_eq!(c["observedGeneration"], 3);
        assert_eq!(p["status"]["stable"], false);
        assert_eq!(p["status"]["unstableReason"], "InvalidObject");
        assert!(message(&bad(Kind::FailoverGroup)).len() < 1024);

        let d = status_patch(&bad(Kind::Database), now);
        assert_eq!(d["kind"], "MysqlDatabase");
        assert!(d["status"].get("stable").is_none());
    }

    #[test]
    fn a_written_condition_counts_as_reported() {
        let mut b = bad(Kind::Database);
        assert!(!b.reported());
        let p = status_patch(&b, Timestamp::UNIX_EPOCH);
        b.conditions = serde_json::from_value(p["status"]["conditions"].clone()).unwrap_or_default();
        assert!(b.reported());
    }
}
