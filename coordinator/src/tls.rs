//! The workers' gRPC port under mutual TLS.
//!
//! # Serving
//! [`ServerTls`] holds the rustls configuration built from a
//! [`ServerTlsMaterial`]: the coordinator's certificate and key, and a
//! client-certificate verifier over `--tls-client-ca` (a client without a
//! certificate chaining to it is refused during the handshake, before any
//! gRPC call). [`incoming`] accepts TCP connections, takes the configuration
//! current at that moment and runs each handshake in its own task (bounded
//! in time and in number, so a slow or silent client holds up nobody); the
//! streams that complete go to tonic, which reads the peer's certificates
//! from them (`Request::peer_certs`, through its `Connected` impl for
//! tokio-rustls streams).
//!
//! # Reload
//! At every accept [`ServerTls::current`] compares the three files' modified
//! time, size and inode with those it last loaded (a Secret volume's
//! update swaps a symlink, which changes the inode) and rebuilds the
//! configuration when one changed. New connections use the new
//! certificates; established ones keep theirs. A reload that fails (a half
//! written file, a key that does not match its certificate) logs a warning
//! and keeps the previous configuration; it is tried again once a file
//! changes again.
//!
//! # Refusals
//! A refused handshake is counted in `flotilla_refused_calls_total` with
//! method `TLS` and reason `no_certificate`, `unknown_ca`,
//! `bad_certificate`, `handshake` (not TLS, or a protocol error), `timeout`
//! or `busy` (too many handshakes at once). A `Register` for a workload
//! class the client certificate does not allow is refused by
//! [`authorize_register`] (method `Register`, reason `class`).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use rustls::pki_types::CertificateDer;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tracing::{debug, info, warn};

use flotilla_shared::WorkloadClass;
use flotilla_shared::tls::{Pem, ServerTlsMaterial, TlsError, WorkerIdentity};

use crate::grpc::refused;

/// Longest a client may take to complete its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most handshakes in progress at once; connections beyond are closed.
pub const MAX_HANDSHAKES: usize = 256;

/// The rustls server configuration for `m`: its certificate chain and key,
/// client certificates required and verified against its client CA, TLS
/// 1.2 and 1.3, ALPN `h2`.
///
/// # Errors
/// An unreadable or malformed input, a client CA that is not a usable
/// trust anchor, a key that does not match the certificate; each names the
/// flag and file.
pub fn server_config(m: &ServerTlsMaterial) -> Result<ServerConfig, TlsError> {
    let invalid = |pem: &Pem, message: String| TlsError::Invalid {
        input: pem.label(),
        message,
    };
    let certs = m.cert.certificates()?;
    let key = m.key.private_key()?;
    let mut roots = RootCertStore::empty();
    for ca in m.client_ca.certificates()? {
        roots
            .add(ca)
            .map_err(|e| invalid(&m.client_ca, format!("not a usable CA certificate: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| invalid(&m.client_ca, e.to_string()))?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(&m.cert, e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| {
            invalid(
                &m.key,
                format!("cannot serve it with {}: {e}", m.cert.label()),
            )
        })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// What identifies one version of a file: a change to any means reload.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(pem: &Pem) -> Option<Stamp> {
    let meta = std::fs::metadata(pem.path()?).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode,
    })
}

/// The files' stamps (`None` for bytes in memory or a file that cannot be
/// read: a file appearing again counts as a change).
fn stamps(m: &ServerTlsMaterial) -> [Option<Stamp>; 3] {
    m.inputs().map(stamp)
}

/// The coordinator's TLS configuration, reloaded when its files change.
#[derive(Debug)]
pub struct ServerTls {
    material: ServerTlsMaterial,
    loaded: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    /// The files' stamps at the last load attempt (good or not).
    stamps: [Option<Stamp>; 3],
    config: Arc<ServerConfig>,
}

impl ServerTls {
    /// Loads `material` now.
    ///
    /// # Errors
    /// See [`server_config`]: a coordinator does not start with inputs it
    /// cannot serve.
    pub fn load(material: ServerTlsMaterial) -> Result<Self, TlsError> {
        let stamps = stamps(&material);
        let config = Arc::new(server_config(&material)?);
        Ok(ServerTls {
            material,
            loaded: Mutex::new(Loaded { stamps, config }),
        })
    }

    /// What it was loaded from.
    #[must_use]
    pub fn material(&self) -> &ServerTlsMaterial {
        &self.material
    }

    /// The configuration for a new connection: the files' again if one of
    /// them changed since the last look, else the current one. A failed
    /// reload keeps the current one, with a warning.
    pub fn current(&self) -> Arc<ServerConfig> {
        let now = stamps(&self.material);
        let mut loaded = self.loaded.lock();
        if now == loaded.stamps {
            return loaded.config.clone();
        }
        loaded.stamps = now;
        match server_config(&self.material) {
            Ok(c) => {
                info!(
                    cert = %self.material.cert.label(),
                    "TLS certificates changed on disk; reloaded (new connections use them)"
                );
                loaded.config = Arc::new(c);
            }
            Err(e) => {
                warn!(error = %e, "TLS certificates changed on disk but cannot be used; keeping the previous ones");
            }
        }
        loaded.config.clone()
    }
}

/// Why a handshake failed, as the refusal metric's reason.
fn handshake_reason(e: &io::Error) -> &'static str {
    use rustls::{CertificateError, Error};
    match e.get_ref().and_then(|inner| inner.downcast_ref::<Error>()) {
        Some(Error::NoCertificatesPresented) => "no_certificate",
        Some(Error::InvalidCertificate(CertificateError::UnknownIssuer)) => "unknown_ca",
        Some(Error::InvalidCertificate(_)) => "bad_certificate",
        _ => "handshake",
    }
}

/// TLS streams for tonic, from `listener`'s connections: each accepted
/// connection (TCP_NODELAY set, as tonic's own incoming does) gets
/// [`ServerTls::current`] and its handshake in a task of its own; those
/// that complete are yielded. Ends (closing the listener) once the stream
/// is dropped.
pub fn incoming(
    listener: TcpListener,
    tls: Arc<ServerTls>,
) -> ReceiverStream<Result<TlsStream<TcpStream>, io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let handshakes = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = tx.closed() => break,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: do not spin.
                    debug!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = handshakes.clone().try_acquire_owned() else {
                refused("TLS", "busy");
                warn!(%peer, "too many TLS handshakes in progress; closing the connection");
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = TlsAcceptor::from(tls.current());
            let tx = tx.clone();
            tokio::spawn(async move {
                let _permit = permit;
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Err(e)) => refuse_handshake(peer, &e),
                    Err(_) => {
                        refused("TLS", "timeout");
                        debug!(%peer, "TLS handshake timed out");
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

fn refuse_handshake(peer: SocketAddr, e: &io::Error) {
    let reason = handshake_reason(e);
    refused("TLS", reason);
    if reason == "handshake" {
        // Port scans and probes end here too: not worth a warning each.
        debug!(%peer, error = %e, "TLS handshake failed");
    } else {
        warn!(%peer, error = %e, "refused a client's certificate during the TLS handshake");
    }
}

/// Checks a `Register` for `class` made over a connection whose peer
/// presented `certs` (`None`: plaintext, nothing to check): the client
/// certificate must allow the class. Returns who the certificate names.
///
/// # Errors
/// `PermissionDenied` (counted: `Register`, `class`) when it does not, or
/// when the certificate cannot be read.
pub fn authorize_register(
    certs: Option<&[CertificateDer<'static>]>,
    class: WorkloadClass,
) -> Result<Option<WorkerIdentity>, Status> {
    let Some(leaf) = certs.and_then(<[_]>::first) else {
        return Ok(None);
    };
    let denied = |message: String| {
        refused("Register", "class");
        Status::permission_denied(message)
    };
    let identity = WorkerIdentity::from_certificate(leaf).map_err(denied)?;
    if identity.allows(class) {
        return Ok(Some(identity));
    }
    warn!(identity = %identity.name, %class, allowed = %identity.classes(), "refused a worker registering for a class its certificate does not allow");
    Err(denied(format!(
        "the client certificate of {:?} allows the workload classes: {}; not {class} \
         (a worker certificate names its classes as DNS names {}, {} or {})",
        identity.name,
        identity.classes(),
        flotilla_shared::tls::class_dns_name(Some(WorkloadClass::Online)),
        flotilla_shared::tls::class_dns_name(Some(WorkloadClass::Batch)),
        flotilla_shared::tls::class_dns_name(None),
    )))
}
