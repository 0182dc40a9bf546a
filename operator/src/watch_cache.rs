//! A watch cache run for the life of the process: the reflector stream is
//! driven by a spawned task (kube's default backoff retries a failed watch),
//! and a flag says whether the store has listed yet, so readers can fall
//! back to the API server until it has.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{Stream, StreamExt as _};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;

/// Whether a watch cache has listed ([`spawn`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Listed(Arc<AtomicBool>);

impl Listed {
    /// True once the store holds its first complete list.
    pub(crate) fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Drives `stream` (a watcher already `.reflect`ing into `store`),
/// logging each watch error with `what` (the request, never an object's
/// content), and returns the flag that turns true once `store` has listed.
pub(crate) fn spawn<K, E, S>(stream: S, store: &Store<K>, what: &'static str) -> Listed
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    S: Stream<Item = Result<E, watcher::Error>> + Send + 'static,
{
    tokio::spawn(stream.for_each(move |event| {
        if let Err(err) = event {
            tracing::warn!(error = %err, "the {what} watch failed; reading directly until it recovers");
        }
        async {}
    }));
    let listed = Listed::default();
    let (flag, waiting) = (listed.0.clone(), store.clone());
    tokio::spawn(async move {
        if waiting.wait_until_ready().await.is_ok() {
            flag.store(true, Ordering::Release);
        }
    });
    listed
}
