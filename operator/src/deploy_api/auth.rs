//! Who may ask: authentication by TokenReview with the `bloodraven-deploy`
//! audience, authorization by `MysqlDatabase.spec.deploymentClients`
//! (docs/deploy-api.md, "Who may ask").
//!
//! - Only `Authorization: Bearer <token>`; the review must come back
//!   authenticated, for a ServiceAccount user, with `bloodraven-deploy`
//!   among its audiences (a review with no audiences, or only others, is
//!   refused: the API server's default audience is not accepted).
//! - Reviews are cached by the token's SHA-256 (never the token) for at most
//!   `cache_ttl`, and never past the token's own `exp` claim: a token whose
//!   expiry cannot be read is not cached at all.
//! - Authorization (who may act for which instance) is `crate::authority`'s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloodraven_api::names::DEPLOY_AUDIENCE;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::{Api, PostParams};

use crate::lease::store::token_sha256;

pub(crate) use crate::authority::Caller;

/// The Pod a token is bound to, as the TokenReview names it (the kubelet's
/// projected tokens are bound to their Pod). Never used to authorize: it
/// only says where to tell a waiting caller what it waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodIdentity {
    /// The Pod's name, in the caller's namespace.
    pub name: String,
    /// The Pod's UID, when the review gave it.
    pub uid: Option<String>,
}

/// The TokenReview `user.extra` keys of a Pod-bound token.
const POD_NAME: &str = "authentication.kubernetes.io/pod-name";
const POD_UID: &str = "authentication.kubernetes.io/pod-uid";

/// An authenticated caller and the Pod its token is bound to, if any.
type Identity = (Caller, Option<PodIdentity>);

/// Why a caller was not authenticated (the message is safe to return).
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthError {
    /// No usable credentials.
    #[error("{0}")]
    Unauthenticated(String),
    /// The TokenReview call itself failed.
    #[error("failed to review the token: {0}")]
    Review(#[from] kube::Error),
}

/// Token reviews with a bounded cache.
#[derive(Clone, Debug)]
pub(crate) struct Authenticator {
    reviews: Api<TokenReview>,
    cache_ttl: Duration,
    cache: Arc<Mutex<HashMap<String, (Identity, Instant)>>>,
    /// Tokens the API server refused, by SHA-256, until when: a client
    /// repeating a bogus token costs the API server one review per
    /// [`REJECTION_TTL`], not one per request.
    rejected: Arc<Mutex<HashMap<String, Instant>>>,
}

/// How long a refused token is answered 401 without asking again. A token
/// does not become valid later (an expired one stays expired; a token for
/// another audience stays one), so this only bounds memory and staleness.
const REJECTION_TTL: Duration = Duration::from_secs(30);

/// Most entries of either cache before expired ones are dropped; past it,
/// new entries are not kept (a flood of distinct tokens costs reviews, not memory).
const MAX_CACHED: usize = 10_000;

/// Seconds until the token's `exp` claim, read without verification (the
/// TokenReview verifies); `None` when unreadable.
fn seconds_to_expiry(token: &str, now_unix: i64) -> Option<i64> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    Some(claims.get("exp")?.as_i64()? - now_unix)
}

/// `system:serviceaccount:<ns>:<name>` → `(ns, name)`.
fn service_account_of(username: &str) -> Option<Caller> {
    let rest = username.strip_prefix("system:serviceaccount:")?;
    let (namespace, service_account) = rest.split_once(':')?;
    if namespace.is_empty() || service_account.is_empty() || service_account.contains(':') {
        return None;
    }
    Some(Caller { namespace: namespace.to_owned(), service_account: service_account.to_owned() })
}

/// The answer to a token the TokenReview refused, the first time and every
/// time after (a refusal is remembered): the review does not say which of
/// these it was, and an audience other than `bloodraven-deploy` is refused
/// by the review itself.
const NOT_ACCEPTED: &str = "the token was not accepted: expired, revoked, for another audience than bloodraven-deploy, or not a token of this cluster";

impl Authenticator {
    /// An authenticator using `reviews`, caching results for at most `cache_ttl`.
    pub(crate) fn new(reviews: Api<TokenReview>, cache_ttl: Duration) -> Self {
        Authenticator { reviews, cache_ttl, cache: Arc::default(), rejected: Arc::default() }
    }

    /// Authenticates the value of an `Authorization` header: the caller,
    /// with the Pod the token is bound to.
    pub(crate) async fn identify(&self, header: Option<&str>) -> Result<Identity, AuthError> {
        let token =
            header.and_then(|h| h.strip_prefix("Bearer ")).map(str::trim).filter(|t| !t.is_empty()).ok_or_else(
                || AuthError::Unauthenticated("missing Authorization: Bearer <ServiceAccount token>".into()),
            )?;
        let key = token_sha256(token);
        if let Some(caller) = self.cached(&key) {
            return Ok(caller);
        }
        if self.was_rejected(&key) {
            return Err(AuthError::Unauthenticated(NOT_ACCEPTED.into()));
        }
        let result = self.review(token, &key).await;
        if matches!(result, Err(AuthError::Unauthenticated(_))) {
            self.reject(key);
        }
        result
    }

    fn was_rejected(&self, key: &str) -> bool {
        let mut rejected = self.rejected.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match rejected.get(key) {
            Some(until) if Instant::now() < *until => true,
            Some(_) => {
                rejected.remove(key);
                false
            }
            None => false,
        }
    }

    fn reject(&self, key: String) {
        let mut rejected = self.rejected.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if rejected.len() >= MAX_CACHED {
            let now = Instant::now();
            rejected.retain(|_, until| *until > now);
        }
        if rejected.len() < MAX_CACHED {
            rejected.insert(key, Instant::now() + REJECTION_TTL);
        }
    }

    async fn review(&self, token: &str, key: &str) -> Result<Identity, AuthError> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_owned()), audiences: Some(vec![DEPLOY_AUDIENCE.to_owned()]) },
            ..TokenReview::default()
        };
        let status = self.reviews.create(&PostParams::default(), &review).await?.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err(AuthError::Unauthenticated(NOT_ACCEPTED.into()));
        }
        if !status.audiences.unwrap_or_default().iter().any(|a| a == DEPLOY_AUDIENCE) {
            return Err(AuthError::Unauthenticated(format!(
                "the token is not for audience {DEPLOY_AUDIENCE}: request a projected token with that audience"
            )));
        }
        let user = status.user.unwrap_or_default();
        let caller = service_account_of(user.username.as_deref().unwrap_or_default())
            .ok_or_else(|| AuthError::Unauthenticated("only ServiceAccount tokens are accepted".into()))?;
        let extra = |key: &str| user.extra.as_ref()?.get(key)?.first().cloned();
        let pod = extra(POD_NAME).map(|name| PodIdentity { name, uid: extra(POD_UID) });
        let identity = (caller, pod);
        self.remember(key.to_owned(), token, &identity);
        Ok(identity)
    }

    fn cached(&self, key: &str) -> Option<Identity> {
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match cache.get(key) {
            Some((identity, until)) if Instant::now() < *until => Some(identity.clone()),
            Some(_) => {
                cache.remove(key);
                None
            }
            None => None,
        }
    }

    fn remember(&self, key: String, token: &str, identity: &Identity) {
        let now_unix = k8s_openapi::jiff::Timestamp::now().as_second();
        let Some(left) = seconds_to_expiry(token, now_unix).and_then(|s| u64::try_from(s).ok()) else { return };
        let ttl = self.cache_ttl.min(Duration::from_secs(left));
        if ttl.is_zero() {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Bounded: drop expired entries when the map grows.
        if cache.len() > MAX_CACHED {
            let now = Instant::now();
            cache.retain(|_, (_, until)| *until > now);
        }
        cache.insert(key, (identity.clone(), Instant::now() + ttl));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_service_account_users() {
        assert_eq!(
            service_account_of("system:serviceaccount:ci:deployer"),
            Some(Caller { namespace: "ci".into(), service_account: "deployer".into() })
        );
        for bad in [
            "admin",
            "system:serviceaccount:ci",
            "system:serviceaccount::x",
            "system:serviceaccount:a:b:c",
            "system:node:n1",
        ] {
            assert_eq!(service_account_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn token_expiry_is_read_from_the_claims() {
        use base64::Engine as _;
        let claims =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"exp":1000,"aud":["bloodraven-deploy"]}"#);
        let token = format!("e30.{claims}.sig");
        assert_eq!(seconds_to_expiry(&token, 400), Some(600));
        assert_eq!(seconds_to_expiry("not-a-jwt", 0), None);
        assert_eq!(seconds_to_expiry("a.%%%.c", 0), None);
    }
}
