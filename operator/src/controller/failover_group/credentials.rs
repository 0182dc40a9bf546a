//! Site credentials without an API read per probe.
//!
//! Model: a metadata-only watch of the Secrets in the credentials namespace
//! (`--credentials-namespace`, the only namespace site credentials are read
//! from) says which Secrets exist and at which `resourceVersion`; the values
//! of a Secret are read with one `get` when a group first needs them or
//! when its `resourceVersion` moves, and kept, keyed by that version, until
//! the next move. So a changed password is used from the first probe after
//! the watch delivers the change, and a probe at steady state makes no API
//! request.
//!
//! Why metadata only: a full Secret reflector would hold the values of every
//! Secret of the namespace (Helm release records, TLS keys, tokens) in this
//! process. The metadata watch holds names and versions; annotations and
//! managed fields are dropped before they are stored
//! (`kubectl.kubernetes.io/last-applied-configuration` can hold a Secret's
//! data). Values are kept only for Secrets a group names, and only the four
//! keys the operator reads. The watch needs `list` and `watch` on Secrets
//! in that namespace (`charts/bloodraven/files/operator-rbac.yaml`); a
//! namespace-wide Secret watch is acceptable there because it is the
//! operator's own credentials namespace, where it may already `get` any
//! Secret by name.
//!
//! Fallback: while the watch has not listed yet, when it cannot (RBAC), and
//! for a name it does not know (just created, or missing), the Secret is
//! read directly, as every probe did before. A missing Secret therefore
//! still costs a read per probe, so that creating it fixes the group at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bloodraven_api::names::{
    SECRET_PASSWORD_KEY, SECRET_REPLICATION_PASSWORD_KEY, SECRET_REPLICATION_USERNAME_KEY, SECRET_USERNAME_KEY,
};
use futures::StreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};

/// The keys of a credentials Secret the operator reads; other keys are
/// never kept.
const KEPT_KEYS: [&str; 4] =
    [SECRET_USERNAME_KEY, SECRET_PASSWORD_KEY, SECRET_REPLICATION_USERNAME_KEY, SECRET_REPLICATION_PASSWORD_KEY];

/// The kept keys of one Secret, shared by every probe that uses them.
pub(crate) type SecretData = Arc<BTreeMap<String, ByteString>>;

/// Credentials Secrets of the credentials namespace: which exist (watched),
/// and the values of those a group names (read once per resourceVersion).
/// Cheap to clone. Never logs or prints a value (`Debug` shows names only).
#[derive(Clone)]
pub(crate) struct Cache {
    namespace: String,
    api: Api<Secret>,
    watched: Store<PartialObjectMeta<Secret>>,
    values: Arc<Mutex<HashMap<String, (String, SecretData)>>>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

impl Cache {
    /// Starts the metadata watch of Secrets in `namespace` (a spawned task
    /// that retries with backoff for the life of the process) and returns at
    /// once; lookups read directly until the first list is in.
    pub(crate) fn start(client: &Client, namespace: &str) -> Cache {
        let (watched, writer) = reflector::store();
        let meta: Api<PartialObjectMeta<Secret>> = Api::namespaced(client.clone(), namespace);
        let ns = namespace.to_owned();
        let stream = watcher(meta, watcher::Config::default())
            .default_backoff()
            .modify(|m| {
                // Only the name and resourceVersion are used; the
                // last-applied annotation can hold the Secret's data.
                m.metadata.annotations = None;
                m.metadata.managed_fields = None;
                m.metadata.labels = None;
            })
            .reflect(writer);
        tokio::spawn(stream.for_each(move |event| {
            if let Err(err) = event {
                // A watch error names the request, never a Secret's value.
                tracing::warn!(namespace = %ns, error = %err, "the credentials Secret watch failed; reading Secrets directly until it recovers");
            }
            async {}
        }));
        Cache {
            namespace: namespace.to_owned(),
            api: Api::namespaced(client.clone(), namespace),
            watched,
            values: Arc::default(),
        }
    }

    /// The kept keys of Secret `name` of the credentials namespace, or
    /// `None` when it does not exist. An API request is made only when the
    /// watch does not know the Secret or its resourceVersion moved.
    ///
    /// # Errors
    /// The `get` failed (e.g. 403 when RBAC forbids it).
    pub(crate) async fn get(&self, name: &str) -> Result<Option<SecretData>, kube::Error> {
        let current = self
            .watched
            .get(&ObjectRef::new(name).within(&self.namespace))
            .and_then(|m| m.metadata.resource_version.clone());
        if let Some(version) = &current
            && let Some(data) = self.kept(name, version)
        {
            return Ok(Some(data));
        }
        let Some(secret) = self.api.get_opt(name).await? else {
            self.lock().remove(name);
            return Ok(None);
        };
        let version = secret.metadata.resource_version.unwrap_or_default();
        let data: SecretData = Arc::new(
            secret.data.unwrap_or_default().into_iter().filter(|(k, _)| KEPT_KEYS.contains(&k.as_str())).collect(),
        );
        self.lock().insert(name.to_owned(), (version, data.clone()));
        Ok(Some(data))
    }

    fn kept(&self, name: &str, version: &str) -> Option<SecretData> {
        self.lock().get(name).filter(|(v, _)| v == version).map(|(_, d)| d.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, SecretData)>> {
        // A panic while holding the lock cannot leave the map half-written
        // (single insert/remove), so a poisoned lock is still usable.
        self.values.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
