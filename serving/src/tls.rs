//! A TLS listener's configuration: rustls with TLS 1.2 and 1.3 only, ALPN
//! `http/1.1` only, the certificate and key read from PEM files (a mounted
//! Secret, e.g. `auxiliary.escrowTLS`) and reloaded when their contents
//! change, without a restart.
//!
//! ALPN offers only `http/1.1`: a client that offers only `h2` fails the
//! handshake (`no_application_protocol`, RFC 7301 §3.2); one that offers
//! both gets `http/1.1`. The listeners speak nothing else (see [`crate::limits`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use axum_server::tls_rustls::RustlsConfig;
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

/// The only ALPN protocol a listener offers.
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// Builds a server configuration from PEM files (`cert`: the chain, leaf
/// first; `key`: PKCS#8, PKCS#1 or SEC1); TLS 1.2 and 1.3 only, ALPN
/// `http/1.1` only, ring as the crypto provider (the workspace's one).
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
    config.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
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
                    tracing::info!(cert = %cert.display(), "reloaded the TLS certificate");
                    last = now;
                }
                Err(err) => tracing::warn!(error = %err, "kept the previous TLS certificate"),
            }
        }
    });
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConnection};

    /// A self-signed EC P-256 leaf for `localhost` made by openssl in a
    /// temporary folder (no key material is kept in the repository).
    fn pair(dir: &Path) -> (PathBuf, PathBuf) {
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let status = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
            .args(["-subj", "/CN=localhost", "-days", "1"])
            .args(["-addext", "subjectAltName=DNS:localhost", "-addext", "basicConstraints=critical,CA:FALSE"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "openssl is needed to make a test certificate");
        (cert, key)
    }

    /// A full handshake in memory; the negotiated (version, ALPN) or the error.
    fn handshake(
        server: ServerConfig,
        cert: &Path,
        versions: &[&'static rustls::SupportedProtocolVersion],
        alpn: &[&[u8]],
    ) -> Result<(rustls::ProtocolVersion, Option<Vec<u8>>), rustls::Error> {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(cert).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let mut client = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let mut c = ClientConnection::new(Arc::new(client), "localhost".try_into().unwrap())?;
        let mut s = ServerConnection::new(Arc::new(server))?;
        for _ in 0..10 {
            let mut wire = Vec::new();
            c.write_tls(&mut wire).unwrap();
            s.read_tls(&mut wire.as_slice()).unwrap();
            s.process_new_packets()?;
            let mut wire = Vec::new();
            s.write_tls(&mut wire).unwrap();
            c.read_tls(&mut wire.as_slice()).unwrap();
            c.process_new_packets()?;
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok((c.protocol_version().unwrap(), c.alpn_protocol().map(<[u8]>::to_vec)));
            }
        }
        Err(rustls::Error::General("the handshake did not finish".into()))
    }

    #[test]
    fn tls12_and_tls13_and_http11_only() {
        use rustls::ProtocolVersion::{TLSv1_2, TLSv1_3};
        use rustls::version::{TLS12, TLS13};
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair(dir.path());
        let config = || server_config(&cert, &key).unwrap();
        assert_eq!(config().alpn_protocols, vec![b"http/1.1".to_vec()]);
        let h1: &[&[u8]] = &[b"http/1.1"];
        assert_eq!(handshake(config(), &cert, &[&TLS13], h1).unwrap(), (TLSv1_3, Some(b"http/1.1".to_vec())));
        assert_eq!(handshake(config(), &cert, &[&TLS12], h1).unwrap(), (TLSv1_2, Some(b"http/1.1".to_vec())));
        assert_eq!(handshake(config(), &cert, &[&TLS13], &[]).unwrap(), (TLSv1_3, None), "no ALPN offer is HTTP/1.1");
        let both: &[&[u8]] = &[b"h2", b"http/1.1"];
        assert_eq!(handshake(config(), &cert, &[&TLS13], both).unwrap().1, Some(b"http/1.1".to_vec()));
        let h2_only = handshake(config(), &cert, &[&TLS13], &[b"h2"]);
        assert_eq!(h2_only, Err(rustls::Error::NoApplicationProtocol), "an h2-only offer fails the handshake");
    }

    #[test]
    fn missing_or_mismatched_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, _key) = pair(dir.path());
        let missing = dir.path().join("nope.key");
        let err = server_config(&cert, &missing).unwrap_err();
        assert!(err.to_string().contains("nope.key"), "{err}");
        let empty = dir.path().join("empty.crt");
        std::fs::write(&empty, "").unwrap();
        let err = server_config(&empty, &missing).unwrap_err();
        assert!(err.to_string().contains("no certificate"), "{err}");
        let other = tempfile::tempdir().unwrap();
        let (_, other_key) = pair(other.path());
        assert!(matches!(server_config(&cert, &other_key), Err(TlsError::Rustls(_))), "a key of another certificate");
    }
}
