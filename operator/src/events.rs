//! Events, one per fact. kube-runtime's recorder folds every Event with the
//! same regarding object, type, reason and action into one series for six
//! minutes and keeps the first note, so a second failover within that time
//! showed as `series.count: 2` of the first one, naming the first one's
//! sites and generation. client-go's correlator keys on the message too.
//! This recorder does the same: each distinct note gets a recorder of its
//! own, so only repeats of the very same fact fold into a series, and
//! every failover, reassertion, rejoin and revocation is an Event with its
//! own sites, generation and request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{self, Event, EventType, Reporter};

/// How long a fact's series stays open: kube-runtime's own cache lifetime.
const SERIES: Duration = Duration::from_secs(6 * 60);

/// The most facts remembered at once; past it the oldest is forgotten (its
/// next repeat starts a new Event instead of extending a series).
const MAX_FACTS: usize = 4096;

/// One fact: everything an Event says, its note included.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Fact {
    type_: EventType,
    reason: String,
    action: String,
    note: Option<String>,
    regarding: Reference,
    related: Option<Reference>,
}

/// The identifying fields of an object reference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Reference {
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
}

impl From<&ObjectReference> for Reference {
    fn from(r: &ObjectReference) -> Self {
        Self {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
        }
    }
}

/// The process's Event recorder: [`Recorder::publish`] as kube-runtime's,
/// folding only repeats of one fact.
#[derive(Clone)]
pub(crate) struct Recorder {
    client: Client,
    reporter: Reporter,
    facts: Arc<Mutex<HashMap<Fact, (events::Recorder, Instant)>>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("reporter", &self.reporter).finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder writing with `client` as `reporter`.
    #[must_use]
    pub(crate) fn new(client: Client, reporter: Reporter) -> Self {
        Self { client, reporter, facts: Arc::default() }
    }

    /// Publishes `event` about `regarding`: a new Event unless the very same
    /// fact was published in the last six minutes, which extends its series.
    ///
    /// # Errors
    /// The API server's refusal of the Event.
    pub(crate) async fn publish(&self, event: &Event, regarding: &ObjectReference) -> Result<(), kube::Error> {
        let fact = Fact {
            type_: event.type_,
            reason: event.reason.clone(),
            action: event.action.clone(),
            note: event.note.clone(),
            regarding: regarding.into(),
            related: event.secondary.as_ref().map(Reference::from),
        };
        if let Some(name) = regarding.name.as_deref().and_then(event_name_for_long) {
            return self.create_alone(event, regarding, name).await;
        }
        let recorder = self.recorder_for(fact, Instant::now());
        recorder.publish(event, regarding).await
    }

    /// Creates `event` about `regarding` under `name`, outside any series:
    /// kube-runtime's recorder names an Event `<object name>.<nanoseconds
    /// in hex>`, which the API server refuses past 253 characters, so an
    /// object with a long name (a MysqlDatabase may have one) would have no
    /// Events at all.
    async fn create_alone(&self, event: &Event, regarding: &ObjectReference, name: String) -> Result<(), kube::Error> {
        use k8s_openapi::api::events::v1::Event as K8sEvent;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
        let object = K8sEvent {
            metadata: ObjectMeta { name: Some(name), namespace: regarding.namespace.clone(), ..ObjectMeta::default() },
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            note: event.note.clone(),
            event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            regarding: Some(regarding.clone()),
            related: event.secondary.clone(),
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter.instance.clone().unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            type_: Some(match event.type_ {
                EventType::Normal => "Normal".into(),
                EventType::Warning => "Warning".into(),
            }),
            ..K8sEvent::default()
        };
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: kube::Api<K8sEvent> = kube::Api::namespaced(self.client.clone(), namespace);
        events.create(&kube::api::PostParams::default(), &object).await.map(drop)
    }

    /// The recorder of `fact`, created when the fact is new or its series
    /// closed; forgets facts whose series closed, and the oldest past
    /// [`MAX_FACTS`].
    fn recorder_for(&self, fact: Fact, now: Instant) -> events::Recorder {
        let mut facts = self.facts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        facts.retain(|_, (_, last)| now.saturating_duration_since(*last) < SERIES);
        if !facts.contains_key(&fact)
            && facts.len() >= MAX_FACTS
            && let Some(oldest) = facts.iter().min_by_key(|(_, (_, last))| *last).map(|(f, _)| f.clone())
        {
            facts.remove(&oldest);
        }
        let entry = facts
            .entry(fact)
            .or_insert_with(|| (events::Recorder::new(self.client.clone(), self.reporter.clone()), now));
        entry.1 = now;
        entry.0.clone()
    }

    #[cfg(test)]
    fn facts(&self) -> usize {
        self.facts.lock().map(|f| f.len()).unwrap_or_default()
    }
}

/// The most characters of an object's name with which kube-runtime's
/// Event name (`<name>.<16 hex digits>`) stays within the API server's 253.
const LONGEST_NAME: usize = 253 - 17;

/// For an object name too long for kube-runtime's Event name, the name of
/// its Event: the name's first characters (ending alphanumeric, so that
/// the result stays a DNS subdomain), a dot and the time in hex, 253
/// characters at most. `None` for names that fit.
fn event_name_for_long(name: &str) -> Option<String> {
    if name.len() <= LONGEST_NAME {
        return None;
    }
    let head = name.get(..LONGEST_NAME).unwrap_or(name).trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    Some(format!("{head}.{:016x}", nanos & u128::from(u64::MAX)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_object_with_a_long_name_gets_an_event_name_within_253_characters() {
        assert_eq!(event_name_for_long(&"a".repeat(LONGEST_NAME)), None);
        let long = format!("{}-x", "a".repeat(LONGEST_NAME - 1));
        let name = event_name_for_long(&long).unwrap();
        assert!(name.len() <= 253, "{}", name.len());
        let (head, tail) = name.rsplit_once('.').unwrap();
        assert_eq!(head, "a".repeat(LONGEST_NAME - 1), "cut before the dash, so each label ends alphanumeric");
        assert_eq!(tail.len(), 16);
        let longest = event_name_for_long(&"b".repeat(253)).unwrap();
        assert_eq!(longest.len(), 253);
    }

    fn fact(note: &str) -> Fact {
        Fact {
            type_: EventType::Normal,
            reason: "PlannedFailoverCompleted".into(),
            action: "PlannedFailover".into(),
            note: Some(note.into()),
            regarding: Reference {
                api_version: Some("bloodraven.shipstream.io/v1alpha1".into()),
                kind: Some("MysqlFailoverGroup".into()),
                namespace: None,
                name: Some("orders".into()),
                uid: Some("u1".into()),
            },
            related: None,
        }
    }

    fn recorder() -> Recorder {
        // A client that is never called: only the fact bookkeeping runs.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        Recorder::new(client, Reporter { controller: "test".into(), instance: None })
    }

    #[tokio::test]
    async fn two_failovers_are_two_facts_and_a_repeat_is_one() {
        let r = recorder();
        let t = Instant::now();
        r.recorder_for(fact("pdx is the active site at topologyGeneration 2"), t);
        r.recorder_for(fact("iad is the active site at topologyGeneration 3"), t);
        assert_eq!(r.facts(), 2);
        r.recorder_for(fact("iad is the active site at topologyGeneration 3"), t + Duration::from_secs(60));
        assert_eq!(r.facts(), 2, "a repeat of one fact is the same fact");
    }

    #[tokio::test]
    async fn a_closed_series_is_forgotten_and_the_facts_are_bounded() {
        let r = recorder();
        let t = Instant::now();
        r.recorder_for(fact("first"), t);
        r.recorder_for(fact("second"), t + SERIES);
        assert_eq!(r.facts(), 1, "the first fact's series closed after six minutes");
        for i in 0..MAX_FACTS + 10 {
            r.recorder_for(fact(&format!("note {i}")), t + SERIES);
        }
        assert_eq!(r.facts(), MAX_FACTS);
    }
}
