//! One watch of one kind, decoded object by object: the state machine that
//! turns `watcher::Event<DynamicObject>` into `watcher::Event<K>`, keeps the
//! reflector store in step, and says which objects do not decode.
//!
//! | event | decodes | passed on | store | finding |
//! |---|---|---|---|---|
//! | `Init`, `InitDone` | | as is | as is | `InitDone`: bad objects not listed again are `Gone` |
//! | `InitApply`, `Apply` | yes | typed | as is | `Decoded` |
//! | `InitApply`, `Apply` | no | nothing | a stale good copy is removed | `Bad` |
//! | `Delete` | yes | typed | as is | `Gone` |
//! | `Delete` | no | the stored copy, if any | the stored copy is removed | `Gone` |
//!
//! A bad object is never passed on as a `Delete`: downstream, a delete
//! means cleanup (decision records, deploy leases), and an object that only
//! fails to decode still exists.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;

use super::decode::{DecodeError, decode};
use super::{Kind, Watched};

/// Which object: kind, namespace (none for cluster-scoped) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Key {
    /// The kind.
    pub kind: Kind,
    /// The namespace, `None` for a cluster-scoped object.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

/// A stored object that does not decode, as last seen.
#[derive(Clone, Debug)]
pub(crate) struct Bad {
    /// Which object.
    pub key: Key,
    /// `metadata.generation`, for `observedGeneration`.
    pub generation: Option<i64>,
    /// Reference for Events.
    pub reference: ObjectReference,
    /// Why it does not decode.
    pub error: DecodeError,
    /// Its `status.conditions`, read leniently (empty when unreadable).
    pub conditions: Vec<Condition>,
}

impl Bad {
    /// Whether the stored status already reports this error: `Ready=False`,
    /// reason `InvalidObject`, with this error's text in its message.
    pub(crate) fn reported(&self) -> bool {
        self.conditions.iter().any(|c| {
            c.type_ == "Ready"
                && c.status == "False"
                && c.reason == super::INVALID_OBJECT
                && c.message.contains(&self.error.text)
        })
    }
}

/// What a watch learned about the objects of its kind.
#[derive(Clone, Debug)]
pub(crate) enum Finding {
    /// The object does not decode.
    Bad(Box<Bad>),
    /// The object decodes.
    Decoded(Key),
    /// The object is gone (deleted, or not listed again after a relist).
    Gone(Key),
}

/// The decoding state of one watch of `K`.
pub(crate) struct Tolerance<K: Watched> {
    store: Option<(Writer<K>, Store<K>)>,
    /// Objects this watch last saw not decoding.
    bad: HashSet<Key>,
    /// Bad objects listed during the relist under way.
    relisted: Option<HashSet<Key>>,
}

impl<K: Watched> std::fmt::Debug for Tolerance<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tolerance").field("bad", &self.bad).finish_non_exhaustive()
    }
}

fn key_of(kind: Kind, obj: &DynamicObject) -> Key {
    Key { kind, namespace: obj.metadata.namespace.clone(), name: obj.metadata.name.clone().unwrap_or_default() }
}

fn bad_of(kind: Kind, obj: &DynamicObject, error: DecodeError) -> Bad {
    let conditions = obj
        .data
        .pointer("/status/conditions")
        .and_then(|c| serde_json::from_value::<Vec<Condition>>(c.clone()).ok())
        .unwrap_or_default();
    Bad {
        key: key_of(kind, obj),
        generation: obj.metadata.generation,
        reference: obj.object_ref(&kind.api_resource()),
        error,
        conditions,
    }
}

impl<K: Watched> Tolerance<K> {
    /// A watch that keeps `store` (writer and its reader) in step, if given.
    pub(crate) fn new(store: Option<(Writer<K>, Store<K>)>) -> Self {
        Tolerance { store, bad: HashSet::new(), relisted: None }
    }

    fn apply(&mut self, event: &Event<K>) {
        if let Some((writer, _)) = &mut self.store {
            writer.apply_watcher_event(event);
        }
    }

    /// The good copy of `key` in the store, if any.
    fn stored(&self, key: &Key) -> Option<K> {
        let (_, reader) = self.store.as_ref()?;
        let mut r = ObjectRef::<K>::new(&key.name);
        if let Some(ns) = &key.namespace {
            r = r.within(ns);
        }
        reader.get(&r).map(|k| (*k).clone())
    }

    /// Handles one watch event: returns what to pass on, and appends what
    /// was learned to `findings`.
    pub(crate) fn step(&mut self, event: Event<DynamicObject>, findings: &mut Vec<Finding>) -> Option<Event<K>> {
        match event {
            Event::Init => {
                self.relisted = Some(HashSet::new());
                Some(self.pass(Event::Init))
            }
            Event::InitDone => {
                if let Some(listed) = self.relisted.take() {
                    for key in self.bad.difference(&listed) {
                        findings.push(Finding::Gone(key.clone()));
                    }
                    self.bad = listed;
                }
                Some(self.pass(Event::InitDone))
            }
            Event::InitApply(obj) => self.applied(&obj, true, findings),
            Event::Apply(obj) => self.applied(&obj, false, findings),
            Event::Delete(obj) => {
                let key = key_of(K::KIND, &obj);
                self.bad.remove(&key);
                findings.push(Finding::Gone(key.clone()));
                let gone = if let Ok(k) = decode::<K>(&obj) { k } else { self.stored(&key)? };
                Some(self.pass(Event::Delete(gone)))
            }
        }
    }

    fn applied(&mut self, obj: &DynamicObject, init: bool, findings: &mut Vec<Finding>) -> Option<Event<K>> {
        let key = key_of(K::KIND, obj);
        match decode::<K>(obj) {
            Ok(k) => {
                self.bad.remove(&key);
                findings.push(Finding::Decoded(key));
                Some(self.pass(if init { Event::InitApply(k) } else { Event::Apply(k) }))
            }
            Err(error) => {
                if init {
                    // Not buffered for InitDone: the relist leaves it out of the store.
                    if let Some(listed) = &mut self.relisted {
                        listed.insert(key.clone());
                    }
                } else if let Some(old) = self.stored(&key) {
                    // A copy that decoded before must not go on being served.
                    self.apply(&Event::Delete(old));
                }
                self.bad.insert(key);
                findings.push(Finding::Bad(Box::new(bad_of(K::KIND, obj, error))));
                None
            }
        }
    }

    fn pass(&mut self, event: Event<K>) -> Event<K> {
        self.apply(&event);
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloodraven_api::v1alpha1::MysqlFailoverGroup;
    use kube::runtime::reflector;
    use serde_json::json;

    fn group(name: &str, port: u32, conditions: &serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "bloodraven.shipstream.io/v1alpha1",
            "kind": "MysqlFailoverGroup",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 2},
            "spec": {
                "sites": [
                    {"name": "iad", "host": "a", "port": port, "credentialsSecretRef": {"namespace": "n", "name": "c"}},
                    {"name": "pdx", "host": "b", "port": 3306, "credentialsSecretRef": {"namespace": "n", "name": "c"}}
                ],
                "initialActiveSite": "iad"
            },
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    fn names(store: &Store<MysqlFailoverGroup>) -> Vec<String> {
        let mut names: Vec<String> = store.state().iter().map(|g| g.metadata.name.clone().unwrap()).collect();
        names.sort();
        names
    }

    fn tolerance() -> (Tolerance<MysqlFailoverGroup>, Store<MysqlFailoverGroup>) {
        let (reader, writer) = reflector::store();
        (Tolerance::new(Some((writer, reader.clone()))), reader)
    }

    #[test]
    fn a_bad_object_in_the_list_is_skipped_and_the_rest_are_served() {
        let (mut t, store) = tolerance();
        let mut found = Vec::new();
        assert!(matches!(t.step(Event::Init, &mut found), Some(Event::Init)));
        assert!(matches!(
            t.step(Event::InitApply(group("good", 3306, &json!([]))), &mut found),
            Some(Event::InitApply(_))
        ));
        assert!(t.step(Event::InitApply(group("bad", 70000, &json!([]))), &mut found).is_none());
        assert!(matches!(t.step(Event::InitDone, &mut found), Some(Event::InitDone)));
        assert_eq!(names(&store), ["good"]);
        let bad: Vec<&Bad> = found
            .iter()
            .filter_map(|f| match f {
                Finding::Bad(b) => Some(&**b),
                _ => None,
            })
            .collect();
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].key.name, "bad");
        assert_eq!(bad[0].error.text, "spec.sites[0].port: invalid value: integer `70000`, expected u16");
        assert_eq!(bad[0].generation, Some(2));
        assert_eq!(bad[0].reference.kind.as_deref(), Some("MysqlFailoverGroup"));
        assert!(!bad[0].reported());
    }

    #[test]
    fn an_object_that_stops_decoding_leaves_the_store_without_a_delete() {
        let (mut t, store) = tolerance();
        let mut found = Vec::new();
        t.step(Event::Init, &mut found);
        t.step(Event::InitApply(group("g", 3306, &json!([]))), &mut found);
        t.step(Event::InitDone, &mut found);
        assert_eq!(names(&store), ["g"]);
        assert!(t.step(Event::Apply(group("g", 70000, &json!([]))), &mut found).is_none());
        assert!(names(&store).is_empty());
        // Fixed: served again.
        assert!(matches!(t.step(Event::Apply(group("g", 3307, &json!([]))), &mut found), Some(Event::Apply(_))));
        assert_eq!(names(&store), ["g"]);
        assert!(matches!(found.last(), Some(Finding::Decoded(k)) if k.name == "g"));
    }

    #[test]
    fn deleting_a_bad_object_passes_on_its_last_good_copy_only() {
        let (mut t, store) = tolerance();
        let mut found = Vec::new();
        assert!(t.step(Event::Delete(group("never-good", 70000, &json!([]))), &mut found).is_none());
        assert!(matches!(found.last(), Some(Finding::Gone(k)) if k.name == "never-good"));
        t.step(Event::Apply(group("g", 3306, &json!([]))), &mut found);
        t.step(Event::Apply(group("g", 70000, &json!([]))), &mut found);
        // The store dropped it already; the delete passes on nothing stored.
        assert!(t.step(Event::Delete(group("g", 70000, &json!([]))), &mut found).is_none());
        assert!(names(&store).is_empty());
        t.step(Event::Apply(group("h", 3306, &json!([]))), &mut found);
        assert!(matches!(t.step(Event::Delete(group("h", 3306, &json!([]))), &mut found), Some(Event::Delete(_))));
    }

    #[test]
    fn a_relist_forgets_bad_objects_that_are_gone() {
        let (mut t, _store) = tolerance();
        let mut found = Vec::new();
        t.step(Event::Init, &mut found);
        t.step(Event::InitApply(group("bad", 70000, &json!([]))), &mut found);
        t.step(Event::InitDone, &mut found);
        found.clear();
        t.step(Event::Init, &mut found);
        t.step(Event::InitDone, &mut found);
        assert!(matches!(found.as_slice(), [Finding::Gone(k)] if k.name == "bad"));
    }

    #[test]
    fn a_reported_error_is_recognised_in_the_stored_status() {
        let (mut t, _store) = tolerance();
        let mut found = Vec::new();
        let conditions = json!([{
            "type": "Ready", "status": "False", "reason": "InvalidObject",
            "message": "spec.sites[0].port: invalid value: integer `70000`, expected u16; fix it",
            "lastTransitionTime": "2026-01-01T00:00:00Z"
        }]);
        t.step(Event::Apply(group("bad", 70000, &conditions)), &mut found);
        let Some(Finding::Bad(bad)) = found.last() else { panic!("{found:?}") };
        assert!(bad.reported());
        t.step(Event::Apply(group("bad", 70001, &bad_conditions())), &mut found);
        let Some(Finding::Bad(bad)) = found.last() else { panic!("{found:?}") };
        assert!(!bad.reported(), "a different error is reported again");
    }

    fn bad_conditions() -> serde_json::Value {
        json!([{"type": "Ready", "status": "False", "reason": "InvalidObject",
                "message": "spec.sites[0].port: invalid value: integer `70000`, expected u16",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}])
    }
}
