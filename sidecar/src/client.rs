//! HTTPS calls to the deploy API (`reqwest` over rustls, HTTP/1.1): trusts
//! only the CA bundle it is given, re-reads the ServiceAccount token file
//! for every request (the kubelet rotates projected tokens), and bounds
//! every request by the request timeout. Answers are translated by
//! [`crate::wire`]; this module never looks inside them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::lease::machine::{PostAnswer, RenewAnswer};
use crate::wire::{self, DdlState, LeaseKind, LeaseToken};

/// Where the CA bundle the deploy API's certificate must chain to comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaSource {
    /// A PEM file (`--ca`, `BLOODRAVEN_CA`).
    File(PathBuf),
    /// PEM text (`BLOODRAVEN_CA_PEM`: what the webhook injects, so a Job
    /// needs no CA object in its own namespace).
    Pem(String),
}

impl std::fmt::Display for CaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaSource::File(path) => write!(f, "{}", path.display()),
            CaSource::Pem(_) => f.write_str("BLOODRAVEN_CA_PEM"),
        }
    }
}

/// Errors building the client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The CA bundle could not be read or parsed.
    #[error("failed to load the CA bundle {origin}: {message}")]
    Ca {
        /// Where it came from: the file, or `BLOODRAVEN_CA_PEM`.
        origin: String,
        /// What went wrong.
        message: String,
    },
    /// The token file could not be read.
    #[error("failed to read the token file {path}: {source}")]
    Token {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The token file is empty.
    #[error("the token file {0} is empty")]
    EmptyToken(PathBuf),
    /// reqwest refused the configuration.
    #[error("failed to build the HTTPS client: {0}")]
    Build(#[from] reqwest::Error),
}

/// A deploy-API client for one group.
#[derive(Clone, Debug)]
pub struct DeployApi {
    http: reqwest::Client,
    /// `https://host:port/deploy/v1/groups/{group}`.
    group_url: String,
    token_file: PathBuf,
}

/// The deploy API base from `--url`: with or without the `/deploy/v1`
/// suffix (the playground's `BLOODRAVEN_URL` has none), no trailing slash.
pub fn api_base(url: &str) -> String {
    let url = url.trim_end_matches('/');
    let url = url.strip_suffix("/deploy/v1").unwrap_or(url);
    format!("{url}/deploy/v1")
}

impl DeployApi {
    /// A client for `group` at `url` (`https://…`), trusting only `ca`.
    pub fn new(
        url: &str,
        ca: &CaSource,
        token_file: &Path,
        group: &str,
        request_timeout: Duration,
    ) -> Result<DeployApi, ClientError> {
        let failed = |message: String| ClientError::Ca { origin: ca.to_string(), message };
        let pem = match ca {
            CaSource::File(path) => std::fs::read(path).map_err(|e| failed(e.to_string()))?,
            CaSource::Pem(pem) => pem.as_bytes().to_vec(),
        };
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| failed(e.to_string()))?;
        if certs.is_empty() {
            return Err(failed("no PEM certificate in it".into()));
        }
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .https_only(true)
            .timeout(request_timeout)
            .connect_timeout(request_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .user_agent(concat!("bloodraven-sidecar/", env!("CARGO_PKG_VERSION")));
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
        let api = DeployApi {
            http: builder.build()?,
            group_url: format!("{}/groups/{group}", api_base(url)),
            token_file: token_file.to_owned(),
        };
        api.bearer()?;
        Ok(api)
    }

    /// The ServiceAccount token, read now.
    fn bearer(&self) -> Result<String, ClientError> {
        let text = std::fs::read_to_string(&self.token_file)
            .map_err(|source| ClientError::Token { path: self.token_file.clone(), source })?;
        let token = text.trim();
        if token.is_empty() {
            return Err(ClientError::EmptyToken(self.token_file.clone()));
        }
        Ok(token.to_owned())
    }

    async fn send(&self, method: reqwest::Method, url: &str, body: Vec<u8>) -> Result<(u16, Vec<u8>), String> {
        self.send_within(method, url, body, None).await
    }

    /// As `send`, with a request timeout other than the client's (a watch
    /// waits longer than a renewal may).
    async fn send_within(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<(u16, Vec<u8>), String> {
        let bearer = self.bearer().map_err(|e| e.to_string())?;
        let mut request = self.http.request(method, url);
        if let Some(t) = timeout {
            request = request.timeout(t);
        }
        let response = request
            .bearer_auth(bearer)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| transport(&e))?;
        let status = response.status().as_u16();
        // Bounded: the API's bodies are small; a huge one is not an answer.
        let bytes = response.bytes().await.map_err(|e| transport(&e))?;
        if bytes.len() > 64 * 1024 {
            return Err(format!("{status} with a body of {} bytes", bytes.len()));
        }
        Ok((status, bytes.to_vec()))
    }

    fn lease_url(&self, kind: LeaseKind, operation_id: &str) -> String {
        format!("{}/leases/{}/{operation_id}", self.group_url, kind.as_str())
    }

    /// `POST …/leases`.
    pub async fn create(
        &self,
        kind: LeaseKind,
        operation_id: &str,
        instance: &str,
        ttl_seconds: u32,
    ) -> (PostAnswer, Option<LeaseToken>) {
        let body = wire::create_body(kind, operation_id, instance, ttl_seconds);
        match self.send(reqwest::Method::POST, &format!("{}/leases", self.group_url), body).await {
            Ok((status, bytes)) => wire::post_answer(status, &bytes, chrono::Utc::now()),
            Err(what) => (PostAnswer::Failed { what }, None),
        }
    }

    /// `PUT …/leases/{kind}/{operationId}` (renewal).
    pub async fn renew(
        &self,
        kind: LeaseKind,
        operation_id: &str,
        token: &LeaseToken,
        ddl_state: Option<DdlState>,
    ) -> RenewAnswer {
        let body = wire::renew_body(token, ddl_state);
        match self.send(reqwest::Method::PUT, &self.lease_url(kind, operation_id), body).await {
            Ok((status, bytes)) => wire::renew_answer(status, &bytes),
            Err(what) => RenewAnswer::Failed { what },
        }
    }

    /// `POST …/leases/{kind}/{operationId}/watch`, waiting up to
    /// `wait_seconds` for the lease to stop being ours; the request may
    /// take that long plus `margin`.
    pub async fn watch(
        &self,
        kind: LeaseKind,
        operation_id: &str,
        token: &LeaseToken,
        wait_seconds: u32,
        margin: Duration,
    ) -> wire::WatchAnswer {
        let body = wire::watch_body(token, wait_seconds);
        let url = format!("{}/watch", self.lease_url(kind, operation_id));
        let timeout = Duration::from_secs(u64::from(wait_seconds)) + margin;
        wire::watch_answer(self.send_within(reqwest::Method::POST, &url, body, Some(timeout)).await)
    }

    /// `DELETE …/leases/{kind}/{operationId}`: `Ok(status)` for an answer
    /// (see [`wire::released`]), `Err` for none.
    pub async fn release(&self, kind: LeaseKind, operation_id: &str, token: &LeaseToken) -> Result<u16, String> {
        let body = wire::release_body(token);
        self.send(reqwest::Method::DELETE, &self.lease_url(kind, operation_id), body).await.map(|(s, _)| s)
    }
}

/// A transport error's text with its causes (reqwest's own text alone
/// says "error sending request").
fn transport(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    if e.is_timeout() { format!("timeout: {text}") } else { text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bases() {
        for (url, want) in [
            ("https://10.0.0.1:8443", "https://10.0.0.1:8443/deploy/v1"),
            ("https://10.0.0.1:8443/", "https://10.0.0.1:8443/deploy/v1"),
            ("https://b.svc:8443/deploy/v1", "https://b.svc:8443/deploy/v1"),
            ("https://b.svc:8443/deploy/v1/", "https://b.svc:8443/deploy/v1"),
        ] {
            assert_eq!(api_base(url), want);
        }
    }

    #[test]
    fn a_bad_ca_or_token_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.crt");
        let token = dir.path().join("token");
        std::fs::write(&ca, b"not a certificate").unwrap();
        std::fs::write(&token, b"t").unwrap();
        let t = Duration::from_secs(1);
        let e = DeployApi::new("https://x", &CaSource::File(ca), &token, "g", t).unwrap_err().to_string();
        assert!(e.contains("ca.crt"), "{e}");
        let missing = CaSource::File(dir.path().join("missing"));
        let e = DeployApi::new("https://x", &missing, &token, "g", t).unwrap_err().to_string();
        assert!(e.contains("failed to load the CA bundle"), "{e}");
        // Inline PEM (what the webhook injects): named by its variable, never echoed.
        let inline = CaSource::Pem("-----BEGIN NOT A CERT-----".into());
        let e = DeployApi::new("https://x", &inline, &token, "g", t).unwrap_err().to_string();
        assert!(e.contains("BLOODRAVEN_CA_PEM") && !e.contains("NOT A CERT"), "{e}");
    }
}
