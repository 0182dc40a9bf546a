//! The TLS listener's configuration: rustls with TLS 1.2 and 1.3 only, the
//! certificate and key read from PEM files (the mounted `auxiliary.escrowTLS`
//! Secret) and reloaded when their contents change, without a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Errors loading the certificate.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or parsed.
    #[error("failed to load {path}: {message}")]
    Load {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// rustls refused the pair (key does not match, unsupported algorithm).
    #[error("failed to build the TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Builds a server configuration from PEM files; TLS 1.2 and 1.3 only, HTTP/1.1.
pub fn server_config(cert: &Path, key: &Path) -> Result<ServerConfig, TlsError> {
    let load = |path: &Path, message: String| TlsError::Load { path: path.to_owned(), message };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| load(cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| load(cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(load(cert, "no certificate in the file".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| load(key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn fingerprint(cert: &Path, key: &Path) -> Option<(Vec<u8>, Vec<u8>)> {
    Some((std::fs::read(cert).ok()?, std::fs::read(key).ok()?))
}

/// Loads the files once (an error here refuses to start), then reloads them
/// every `period` when their contents changed. A bad new pair is logged and
/// the previous one kept.
pub fn load_and_watch(cert: PathBuf, key: PathBuf, period: Duration) -> Result<RustlsConfig, TlsError> {
    let config = RustlsConfig::from_config(Arc::new(server_config(&cert, &key)?));
    let watched = config.clone();
    tokio::spawn(async move {
        let mut last = fingerprint(&cert, &key);
        loop {
            tokio::time::sleep(period).await;
            let now = fingerprint(&cert, &key);
            if now.is_none() || now == last {
                continue;
            }
            match server_config(&cert, &key) {
                Ok(c) => {
                    watched.reload_from_config(Arc::new(c));
                    tracing::info!(cert = %cert.display(), "reloaded the deploy API certificate");
                    last = now;
                }
                Err(err) => tracing::warn!(error = %err, "kept the previous deploy API certificate"),
            }
        }
    });
    Ok(config)
}
