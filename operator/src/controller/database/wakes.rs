//! Which watch events wake the MysqlDatabase reconciler: a group's
//! metadata and its decision are watched whole, but only the parts a
//! database depends on pass (a fingerprint per group), so the probe
//! heartbeat of a thousand groups wakes no database.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use bloodraven_api::v1alpha1::MysqlFailoverGroup;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

/// Passes on, from a watch of objects `K`, each object whose
/// `fingerprint` differs from the last one seen of that name (and every
/// deletion); `Init`/`InitDone` and unchanged objects are dropped.
pub(super) fn changed_only<K, S>(
    events: S,
    fingerprint: fn(&K) -> u64,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let mut seen: HashMap<String, u64> = HashMap::new();
    events.filter_map(move |event| {
        let out = match event {
            Ok(watcher::Event::Apply(k) | watcher::Event::InitApply(k)) => {
                let fp = fingerprint(&k);
                (seen.insert(k.meta().name.clone().unwrap_or_default(), fp) != Some(fp)).then_some(Ok(k))
            }
            Ok(watcher::Event::Delete(k)) => {
                seen.remove(k.meta().name.as_deref().unwrap_or_default());
                Some(Ok(k))
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
            Err(err) => Some(Err(err)),
        };
        std::future::ready(out)
    })
}

fn hash_of(value: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// What of a group's metadata a database depends on: the incarnation, the
/// spec (sites, allowed namespaces; also how a group that no longer
/// decodes shows itself), the labels (`--group-selector` shards), the
/// annotations and the deletion.
pub(super) fn metadata_fingerprint(group: &PartialObjectMeta<MysqlFailoverGroup>) -> u64 {
    let m = &group.metadata;
    hash_of((
        &m.uid,
        m.generation,
        &m.labels,
        &m.annotations,
        m.deletion_timestamp.as_ref().map(|t| t.0.as_millisecond()),
    ))
}

/// What of a group's status a database depends on: the decision (active
/// site, topology generation), the instance claims, and what the last probe
/// found of the active site (writable, at which endpoint, which server: the
/// `-primary` Service follows a spec endpoint once it is confirmed there;
/// found by an attack: without it, the confirmation waited for the 60 s
/// re-check). Other sites' health, conditions and probe times are not in it.
pub(super) fn decision_fingerprint(group: &MysqlFailoverGroup) -> u64 {
    let status = group.status.clone().unwrap_or_default();
    let claims: Vec<(String, String)> = status.instance_claims.into_iter().map(|c| (c.instance, c.namespace)).collect();
    let active = status
        .health
        .iter()
        .find(|h| Some(&h.site) == status.active_site.as_ref())
        .map(|h| (h.writable, h.answered_endpoint.clone(), h.server_id));
    hash_of((&group.metadata.uid, status.active_site, status.topology_generation, claims, active))
}
