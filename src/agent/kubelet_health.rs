//! What kubehash can observe of the kubelet on its node, as positive evidence for acting: its
//! healthz (read with a real HTTP client, http or https), its process (by name, in `/proc`), and
//! the version of the kubelet binary on disk.
//!
//! Each observation has three outcomes, never two: a healthz is `Up` (an HTTP 200), `Refused`
//! (nothing listens: the connection is refused) or `Unknown` (a timeout, another status, a TLS or
//! protocol error). Only `Refused` is evidence that the kubelet stopped, and only after it was
//! seen `Up`: a healthz on another port, a slow answer or an https URL the client cannot read are
//! not a stopped kubelet.

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use tracing::warn;

use crate::rewrite::gate::{Unsafe, WriteGate};
use crate::source::kubelet_binary::kubelet_processes;

/// What the kubelet's healthz said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// HTTP 200.
    Up,
    /// The connection was refused: nothing listens there.
    Refused,
    /// Anything else, with what happened.
    Unknown(String),
}

/// How long one healthz read may take.
const HEALTHZ_TIMEOUT: Duration = Duration::from_secs(5);

/// A healthz URL kubehash can read: `http://` or `https://`, a host, and a path.
pub fn healthz_url(url: &str) -> Result<http::Uri, String> {
    match url.parse::<http::Uri>() {
        Ok(uri)
            if matches!(uri.scheme_str(), Some("http" | "https")) && uri.authority().is_some() =>
        {
            Ok(uri)
        }
        _ => Err("expected an http:// or https:// URL with a host, such as \
                  http://127.0.0.1:10248/healthz"
            .into()),
    }
}

/// Reads the kubelet's healthz once. `https://` is read without checking the certificate, as the
/// kubelet's own HTTPS probes do: the answer says only whether something is up there.
pub async fn healthz(url: &str) -> Health {
    let uri = match healthz_url(url) {
        Ok(u) => u,
        Err(e) => return Health::Unknown(format!("bad healthz URL {url:?}: {e}")),
    };
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(insecure_tls())
        .https_or_http()
        .enable_http1()
        .build();
    let client: Client<_, Empty<bytes::Bytes>> =
        Client::builder(TokioExecutor::new()).build(connector);
    let request = async {
        let resp = client.get(uri).await?;
        let status = resp.status();
        // Read the body to the end, as a client does; the status decides.
        let _ = resp.into_body().collect().await;
        Ok::<_, hyper_util::client::legacy::Error>(status)
    };
    match tokio::time::timeout(HEALTHZ_TIMEOUT, request).await {
        Err(_) => Health::Unknown(format!("no answer within {HEALTHZ_TIMEOUT:?}")),
        Ok(Ok(s)) if s == http::StatusCode::OK => Health::Up,
        Ok(Ok(s)) => Health::Unknown(format!("HTTP {s}")),
        Ok(Err(e)) if refused(&e) => Health::Refused,
        Ok(Err(e)) => Health::Unknown(crate::error::causes(&e)),
    }
}

fn refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        cur = err.source();
    }
    false
}

fn insecure_tls() -> rustls::ClientConfig {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.dangerous()
                .with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate(provider)))
                .with_no_client_auth()
        })
        .unwrap_or_else(|_| {
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        })
}

/// Accepts any server certificate (signatures are still checked): a liveness read, not trust.
#[derive(Debug)]
struct AnyCertificate(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A running kubelet process ([`kubelet_processes`]), described with its pid. Only processes in this
/// process's PID namespace are visible: a pod needs `hostPID`.
pub fn kubelet_process() -> Option<String> {
    let (pid, name) = kubelet_processes().into_iter().next()?;
    Some(format!("process {name}, pid {pid}"))
}

/// What stops `apply` and `rollback` while a kubelet runs: a rewritten hash seen by the old
/// kubelet restarts the very container it was meant to keep.
#[derive(Debug, Clone)]
pub struct KubeletGuard {
    /// The kubelet's healthz URL (`http://127.0.0.1:10248/healthz`); anything accepting a
    /// connection there counts as a running kubelet, whatever PID namespace it runs in.
    pub healthz: Option<String>,
    /// Go on anyway (`--force`).
    pub force: bool,
    /// The running kubelet a check went on past because of `force`.
    pub forced_past: Option<String>,
}

impl WriteGate for KubeletGuard {
    async fn check(&mut self) -> std::result::Result<(), Unsafe> {
        let Some(found) = running_kubelet(self.healthz.as_deref()).await else {
            return Ok(());
        };
        if self.force {
            warn!(kubelet = %found, "a kubelet is running; going on because of --force");
            self.forced_past = Some(found);
            return Ok(());
        }
        Err(Unsafe(format!(
            "a kubelet is running ({found}): stop it first, so that it never sees the hashes \
             kubehash writes, or pass --force"
        )))
    }

    fn overridden(&self) -> Option<&str> {
        self.forced_past.as_deref()
    }
}

/// A running kubelet, described: a [`kubelet_process`], or anything accepting connections on the
/// kubelet's healthz address (which also finds a kubelet in another PID namespace).
pub async fn running_kubelet(healthz: Option<&str>) -> Option<String> {
    if let Some(found) = kubelet_process() {
        return Some(found);
    }
    healthz_answers(healthz?).await
}

/// Something accepting connections on the kubelet's healthz address `healthz`, described.
pub async fn healthz_answers(healthz: &str) -> Option<String> {
    let addr = healthz_address(healthz)?;
    let connect = tokio::net::TcpStream::connect(addr.as_str());
    match tokio::time::timeout(Duration::from_secs(2), connect).await {
        Ok(Ok(_)) => Some(format!(
            "something answers on the kubelet's healthz address {addr}"
        )),
        _ => None,
    }
}

/// `http://127.0.0.1:10248/healthz` → `127.0.0.1:10248` (port 80 or 443 by scheme if absent).
pub fn healthz_address(url: &str) -> Option<String> {
    let (rest, port) = if let Some(r) = url.strip_prefix("https://") {
        (r, 443)
    } else {
        (url.strip_prefix("http://").unwrap_or(url), 80)
    };
    let authority = rest.split('/').next().filter(|a| !a.is_empty())?;
    let has_port = match authority.rfind(']') {
        Some(end) => authority[end..].contains(':'),
        None => authority.contains(':'),
    };
    Some(if has_port {
        authority.to_string()
    } else {
        format!("{authority}:{port}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_addresses() {
        assert_eq!(
            healthz_address("http://127.0.0.1:10248/healthz").as_deref(),
            Some("127.0.0.1:10248")
        );
        assert_eq!(
            healthz_address("https://localhost/healthz").as_deref(),
            Some("localhost:443")
        );
        assert_eq!(
            healthz_address("http://[::1]/x").as_deref(),
            Some("[::1]:80")
        );
        assert_eq!(
            healthz_address("http://[::1]:9/").as_deref(),
            Some("[::1]:9")
        );
        assert_eq!(healthz_address("http:///x"), None);
    }
}
