//! The webhook's reads of the cluster: watch caches of MysqlFailoverGroups
//! and MysqlDatabases (as untyped objects, so an object stored before a
//! schema change never stops the cache), a re-read from the API server
//! before any refusal that rests on them (a cache may be a moment behind a
//! MysqlDatabase created just before its Job), and SubjectAccessReviews.

use std::time::Duration;

use bloodraven_api::names;
use futures::StreamExt as _;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use serde_json::Value;

use crate::inject::Ask;

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(names::GROUP, names::VERSION, kind), plural)
}

/// Watch caches and the client behind them.
#[derive(Clone)]
pub struct Authority {
    client: Client,
    groups: (Store<DynamicObject>, ApiResource),
    databases: (Store<DynamicObject>, ApiResource),
    authz_delay: Option<Duration>,
    /// SubjectAccessReviews in flight, at most [`MAX_REVIEWS_IN_FLIGHT`]:
    /// one review fans out to one per namespace, and a flood of reviews
    /// must not become a flood on the API server's authorizer.
    reviews: std::sync::Arc<tokio::sync::Semaphore>,
}

/// SubjectAccessReviews the webhook has in flight at most.
pub const MAX_REVIEWS_IN_FLIGHT: usize = 16;

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

fn cache(client: &Client, ar: &ApiResource) -> Store<DynamicObject> {
    let writer = reflector::store::Writer::new(ar.clone());
    let reader = writer.as_reader();
    let api = Api::<DynamicObject>::all_with(client.clone(), ar);
    // Only spec and status are read: what tenants may write at will on a
    // MysqlDatabase (annotations, labels) is not cached (`names::cached`).
    let config = watcher::Config::default().page_size(names::cached::LIST_PAGE);
    let stream = watcher(api, config)
        .default_backoff()
        .modify(|o| names::cached::trim(&mut o.metadata, &[], names::cached::no_labels))
        .reflect(writer)
        .touched_objects();
    tokio::spawn(stream.for_each(|_| async {}));
    reader
}

impl Authority {
    /// Starts both caches (ready once [`Authority::wait_ready`] returns).
    pub fn start(client: Client, authz_delay: Option<Duration>) -> Authority {
        let g = resource("MysqlFailoverGroup", "mysqlfailovergroups");
        let d = resource("MysqlDatabase", "mysqldatabases");
        let groups = (cache(&client, &g), g);
        let databases = (cache(&client, &d), d);
        Authority {
            client,
            groups,
            databases,
            authz_delay,
            reviews: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_REVIEWS_IN_FLIGHT)),
        }
    }

    /// The webhook's API client (its own ServiceAccount).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Waits for both caches' first lists.
    pub async fn wait_ready(&self) {
        let _ = self.groups.0.wait_until_ready().await;
        let _ = self.databases.0.wait_until_ready().await;
    }

    async fn read(
        &self,
        which: &(Store<DynamicObject>, ApiResource),
        ns: Option<&str>,
        name: &str,
        fresh: bool,
    ) -> Result<Option<Value>, String> {
        let (store, ar) = which;
        if !fresh {
            let mut key = ObjectRef::new_with(name, ar.clone());
            if let Some(ns) = ns {
                key = key.within(ns);
            }
            return Ok(store.get(&key).and_then(|o| serde_json::to_value(&*o).ok()));
        }
        let api = match ns {
            Some(ns) => Api::<DynamicObject>::namespaced_with(self.client.clone(), ns, ar),
            None => Api::<DynamicObject>::all_with(self.client.clone(), ar),
        };
        let object = api.get_opt(name).await.map_err(|e| format!("failed to read {} {name}: {e}", ar.kind))?;
        Ok(object.and_then(|o| serde_json::to_value(&o).ok()))
    }

    /// Whether the Job's ServiceAccount (`namespace`, `ask.service_account`)
    /// may act for `ask.instance` of `ask.group`: the MysqlDatabase that
    /// holds the instance's claim (`status.instanceClaims` of the group,
    /// written by the operator) lists it in `spec.deploymentClients` — the
    /// deploy API's own rule (operator/src/authority.rs, rule 3).
    ///
    /// Errors: the refusal, saying what to fix; read from the caches, then
    /// confirmed from the API server before refusing.
    pub async fn may_act(&self, namespace: &str, ask: &Ask) -> Result<(), String> {
        match self.decide(namespace, ask, false).await {
            Ok(()) => Ok(()),
            Err(_) => self.decide(namespace, ask, true).await,
        }
    }

    async fn decide(&self, namespace: &str, ask: &Ask, fresh: bool) -> Result<(), String> {
        // Said to whoever may create a Job here, who may not read groups or
        // other namespaces: whether the group exists, whether the name is
        // claimed, and by which namespace, are the same answer unless the
        // claim is this namespace's own.
        let not_here = || {
            format!(
                "no MysqlDatabase named {:?} that lists ServiceAccount {namespace}/{} in spec.deploymentClients is accepted on MysqlFailoverGroup {:?} (annotations {} and {}): create it in a namespace the group allows (its status must say Ready) and list this ServiceAccount, or fix the annotations",
                ask.instance,
                ask.service_account,
                ask.group,
                names::inject::GROUP,
                names::inject::INSTANCE
            )
        };
        let Some(group) = self.read(&self.groups, None, &ask.group, fresh).await? else { return Err(not_here()) };
        let claims = group.pointer("/status/instanceClaims").and_then(Value::as_array).cloned().unwrap_or_default();
        let claim = claims.iter().find(|c| c.get("instance").and_then(Value::as_str) == Some(ask.instance.as_str()));
        let Some(db_ns) = claim.and_then(|c| c.get("namespace")).and_then(Value::as_str) else {
            // This namespace's own MysqlDatabase of the name, not claimed
            // yet (a moment after its creation): it may be told so.
            if self.read(&self.databases, Some(namespace), &ask.instance, fresh).await?.is_some() {
                return Err(format!(
                    "MysqlDatabase {namespace}/{} is not accepted on MysqlFailoverGroup {:?} yet: its Ready condition says why (ClaimPending clears within the group's probe interval; retry in a few seconds)",
                    ask.instance, ask.group
                ));
            }
            return Err(not_here());
        };
        let Some(db) = self.read(&self.databases, Some(db_ns), &ask.instance, fresh).await? else {
            return Err(not_here());
        };
        let listed = db.pointer("/spec/deploymentClients").and_then(Value::as_array).into_iter().flatten().any(|c| {
            c.get("namespace").and_then(Value::as_str) == Some(namespace)
                && c.get("serviceAccount").and_then(Value::as_str) == Some(ask.service_account.as_str())
        });
        if listed {
            Ok(())
        } else if db_ns == namespace {
            // This namespace's own MysqlDatabase: it may say what to fix.
            Err(format!(
                "MysqlDatabase {db_ns}/{} does not list this Job's ServiceAccount in spec.deploymentClients: add {{namespace: {namespace}, serviceAccount: {}}} (a change that needs verb {:?}), or run the Job as a listed ServiceAccount (spec.template.spec.serviceAccountName)",
                ask.instance,
                ask.service_account,
                crate::guards::database::VERB
            ))
        } else {
            Err(not_here())
        }
    }

    /// Why the group will refuse the claim of `object`, a MysqlDatabase
    /// being created in `namespace` ([`crate::guards::database::claim_refusal`]),
    /// from the API server's current group and namespace labels (creates of
    /// MysqlDatabases are rare; a cache a moment behind would refuse wrongly).
    /// Reads that fail give `None`: the operator stays the authority and
    /// reports the refusal on the object.
    pub async fn claim_refusal(&self, namespace: &str, object: &Value) -> Option<String> {
        let group = object.pointer("/spec/failoverGroupRef/name").and_then(Value::as_str)?;
        let group = self.read(&self.groups, None, group, true).await.ok().flatten()?;
        let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone());
        let labels = namespaces.get_opt(namespace).await.ok()?.and_then(|n| n.metadata.labels);
        crate::guards::database::claim_refusal(namespace, object, &group, labels.as_ref())
    }

    /// Whether `user` may do `verb` on `mysqldatabases` `name` in
    /// `namespace` (a SubjectAccessReview). Errors: the review could not be made.
    pub async fn allowed(&self, user: &UserInfo, verb: &str, namespace: &str, name: &str) -> Result<bool, String> {
        let _slot = self.reviews.acquire().await.map_err(|e| format!("the SubjectAccessReview was not made: {e}"))?;
        if let Some(delay) = self.authz_delay {
            tokio::time::sleep(delay).await;
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups.clone(),
                uid: user.uid.clone(),
                extra: user.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(names::GROUP.to_owned()),
                    resource: Some("mysqldatabases".to_owned()),
                    verb: Some(verb.to_owned()),
                    namespace: Some(namespace.to_owned()),
                    name: Some(name.to_owned()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("the SubjectAccessReview failed: {e}"))?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}
