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
    /// The token file is larger than any ServiceAccount token (its text is never shown).
    #[error("the token file {0} holds more than {MAX_TOKEN_BYTES} bytes: not a ServiceAccount token")]
    LargeToken(PathBuf),
    /// The token has characters a bearer token cannot have (its text is never shown).
    #[error(
        "the token file {0} holds characters a bearer token cannot have (only visible ASCII, one line): not a ServiceAccount token"
    )]
    BadToken(PathBuf),
    /// reqwest refused the configuration.
    #[error("failed to build the HTTPS client: {0}")]
    Build(#[from] reqwest::Error),
}

/// Largest token file read, in bytes (a projected ServiceAccount token is
/// about 1 KiB; a file beyond this, or a device such as `/dev/zero`, is
/// not one).
pub const MAX_TOKEN_BYTES: u64 = 64 * 1024;

/// Largest CA bundle read, in bytes (a whole system bundle is ~250 KiB).
pub const MAX_CA_BYTES: u64 = 4 * 1024 * 1024;

/// Largest answer body read, in bytes: the deploy API's are small; a
/// bigger one is not an answer and is not buffered.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Reads at most `max` bytes of `path`; `Ok(None)` when it holds more.
pub fn read_bounded(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(max + 1).read_to_end(&mut bytes)?;
    Ok(if bytes.len() as u64 > max { None } else { Some(bytes) })
}

/// The DER certificates of a CA bundle, checked one by one, so a bundle
/// that is not one says so at start: no certificate, a private key in it
/// (pass only the CA), or a certificate that does not parse.
fn ca_certificates(pem: &[u8]) -> Result<Vec<reqwest::Certificate>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::{PemObject as _, SectionKind};
    let mut certs = Vec::new();
    for (i, item) in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem).enumerate() {
        match item {
            Ok((SectionKind::Certificate, der)) => {
                let mut store = rustls::RootCertStore::empty();
                store
                    .add(CertificateDer::from(der.clone()))
                    .map_err(|e| format!("PEM block {} is not a usable certificate: {e}", i + 1))?;
                certs.push(reqwest::Certificate::from_der(&der).map_err(|e| e.to_string())?);
            }
            Ok((SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey, _)) => {
                return Err("it holds a private key: pass only the CA certificate(s)".into());
            }
            Ok(_) => {}
            Err(e) => return Err(format!("unreadable PEM: {e}")),
        }
    }
    if certs.is_empty() {
        return Err("no PEM certificate in it".into());
    }
    Ok(certs)
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
            CaSource::File(path) => read_bounded(path, MAX_CA_BYTES)
                .map_err(|e| failed(e.to_string()))?
                .ok_or_else(|| failed(format!("larger than {MAX_CA_BYTES} bytes: not a CA bundle")))?,
            CaSource::Pem(pem) => pem.as_bytes().to_vec(),
        };
        let certs = ca_certificates(&pem).map_err(failed)?;
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .https_only(true)
            // An answer is the deploy API's or none: a redirect would resend
            // the body (lease token included) to wherever it points.
            .redirect(reqwest::redirect::Policy::none())
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
        let path = &self.token_file;
        let bytes = read_bounded(path, MAX_TOKEN_BYTES)
            .map_err(|source| ClientError::Token { path: path.clone(), source })?
            .ok_or_else(|| ClientError::LargeToken(path.clone()))?;
        let token = bytes.trim_ascii();
        if token.is_empty() {
            return Err(ClientError::EmptyToken(path.clone()));
        }
        // Checked here, at start and on every re-read: a token that cannot be
        // a header value would fail every request until the acquire timeout.
        if !token.iter().all(u8::is_ascii_graphic) {
            return Err(ClientError::BadToken(path.clone()));
        }
        Ok(String::from_utf8_lossy(token).into_owned())
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
        // The secrets this request carries, scrubbed from whatever comes
        // back: an error page that echoes the request (a proxy's, a debug
        // server's) is logged and recorded, and must not carry them.
        let mut secrets = vec![bearer.clone()];
        if let Ok(serde_json::Value::Object(o)) = serde_json::from_slice::<serde_json::Value>(&body)
            && let Some(serde_json::Value::String(t)) = o.get("token")
        {
            secrets.push(t.clone());
        }
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
        // Bounded while read, never buffered whole: a huge body is not an
        // answer (the attack round saw 1.1 GB resident in 5 s).
        let too_big = || format!("{status} with a body of more than {MAX_BODY_BYTES} bytes: not an answer");
        if response.content_length().is_some_and(|n| n > MAX_BODY_BYTES as u64) {
            return Err(too_big());
        }
        let mut response = response;
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| transport(&e))? {
            if bytes.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(too_big());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok((status, redact(bytes, &secrets)))
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
            Ok((status, bytes)) => {
                let asked = wire::Asked { kind, operation_id, instance };
                wire::post_answer(status, &bytes, chrono::Utc::now(), asked)
            }
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
        revision: Option<&str>,
    ) -> RenewAnswer {
        let body = wire::renew_body(token, ddl_state, revision);
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

/// `bytes` with every occurrence of each non-empty secret replaced by
/// `[redacted]`.
pub fn redact(bytes: Vec<u8>, secrets: &[String]) -> Vec<u8> {
    let mut out = bytes;
    for secret in secrets.iter().map(String::as_bytes).filter(|s| !s.is_empty()) {
        if !out.windows(secret.len()).any(|w| w == secret) {
            continue;
        }
        let mut next = Vec::with_capacity(out.len());
        let mut i = 0;
        while i < out.len() {
            if out[i..].starts_with(secret) {
                next.extend_from_slice(b"[redacted]");
                i += secret.len();
            } else {
                next.push(out[i]);
                i += 1;
            }
        }
        out = next;
    }
    out
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

    /// Attack round: an error page that echoes the request (the bearer
    /// header, the body with the lease token) went into the log and the
    /// record as the answer's text.
    #[test]
    fn echoed_secrets_are_scrubbed_from_answers() {
        let echo =
            b"400 bad: Authorization: Bearer sa.TOKEN.x body {\"token\":\"lease-abc\"} again sa.TOKEN.x".to_vec();
        let out = String::from_utf8(redact(echo, &["sa.TOKEN.x".into(), "lease-abc".into(), String::new()])).unwrap();
        assert_eq!(out, "400 bad: Authorization: Bearer [redacted] body {\"token\":\"[redacted]\"} again [redacted]");
        assert_eq!(redact(b"plain".to_vec(), &["x".repeat(10)]), b"plain");
    }

    /// Attack round: a certificate block that does not parse failed with
    /// "builder error"; a private key beside the CA was taken silently; a
    /// device (`/dev/zero`) as the CA was read forever.
    #[test]
    fn a_ca_bundle_that_is_not_one_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, b"t").unwrap();
        let t = Duration::from_secs(1);
        let key = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIGtra2tra2tra2tra2tra2tra2tra2tra2tra2tra2tr\n-----END PRIVATE KEY-----\n";
        let bad_der = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        for (pem, want) in [
            (String::new(), "no PEM certificate"),
            (key.to_owned(), "private key"),
            (bad_der.to_owned(), "PEM block 1 is not a usable certificate"),
            (format!("{bad_der}{key}"), "not a usable certificate"),
        ] {
            let e = DeployApi::new("https://x", &CaSource::Pem(pem.clone()), &token, "g", t).unwrap_err().to_string();
            assert!(e.contains(want), "{pem:?}: {e}");
            assert!(!e.contains("MC4CAQAw"), "never the key: {e}");
        }
        let e =
            DeployApi::new("https://x", &CaSource::File("/dev/zero".into()), &token, "g", t).unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
    }

    /// Attack round: a token file with a newline or a control character in
    /// it was accepted at start and then failed every request ("builder
    /// error") until the acquire timeout; `/dev/zero` was read forever. The
    /// errors never show the token.
    #[test]
    fn a_token_file_that_is_not_a_token_is_refused_at_start_without_showing_it() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        let api = DeployApi { http: reqwest::Client::new(), group_url: String::new(), token_file: token.clone() };
        for (text, want) in [
            (&b""[..], "is empty"),
            (b" \n", "is empty"),
            (b"secret1\nsecret2", "characters a bearer token cannot have"),
            (b"secret\x01x", "characters a bearer token cannot have"),
            ("secr\u{e9}t".as_bytes(), "characters a bearer token cannot have"),
            (b"secret with space", "characters a bearer token cannot have"),
        ] {
            std::fs::write(&token, text).unwrap();
            let e = api.bearer().unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains("secr"), "{e}");
        }
        std::fs::write(&token, vec![b'a'; MAX_TOKEN_BYTES as usize + 1]).unwrap();
        assert!(api.bearer().unwrap_err().to_string().contains("more than"));
        std::fs::write(&token, b"  eyJhbGciOi.J9.x-_\n").unwrap();
        assert_eq!(api.bearer().unwrap(), "eyJhbGciOi.J9.x-_");
        let dev = DeployApi { token_file: "/dev/zero".into(), ..api };
        assert!(dev.bearer().unwrap_err().to_string().contains("more than"));
    }
}
