//! JSON over HTTP(S) `POST`, the transport of scheduler extenders and
//! placement webhooks: hyper-util's pooled client over rustls (the stack
//! `kube` already brings), one per remote service.
//!
//! # Threads
//! Every exchange runs on one process-wide I/O runtime (a dedicated thread,
//! `flotilla-http`), whoever asks: the scheduling thread (a plain OS thread
//! that must block until the reply is in, as upstream's scheduling cycle
//! does), async tasks of the coordinator, or tests on their own runtimes.
//! Connections therefore live on a runtime that outlives every caller, and
//! [`JsonClient::post`] can be awaited from any runtime or waited for with
//! [`run_blocking`] from any thread.
//!
//! # Deadlines
//! A client's timeout covers the whole exchange (connect, TLS, request,
//! reading the reply), as Go's `http.Client.Timeout` does for upstream's
//! extenders. A reply body is read up to [`MAX_REPLY_BYTES`].
//!
//! # TLS
//! [`TlsConfig`] is upstream's `ExtenderTLSConfig`: `insecure` skips
//! certificate verification, `serverName` overrides the name checked (and
//! sent as SNI), `caFile`/`caData` replace the system roots, and
//! `certFile`/`keyFile` (or `certData`/`keyData`) are a client certificate
//! for mutual TLS. PEM everywhere; `*Data` fields hold the PEM bytes.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Uri, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

/// Largest reply body read (bytes); a longer one is an error, so a broken
/// peer cannot exhaust memory.
pub const MAX_REPLY_BYTES: usize = 64 << 20;

/// Upstream's `ExtenderTLSConfig` (also used by placement webhooks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// Skip verifying the server's certificate (testing only).
    pub insecure: bool,
    /// Name to verify the server's certificate against (and send as SNI)
    /// instead of the URL's host.
    pub server_name: String,
    /// Client certificate (PEM file) for mutual TLS.
    pub cert_file: String,
    /// Its private key (PEM file).
    pub key_file: String,
    /// CA certificates (PEM file) trusted instead of the system roots.
    pub ca_file: String,
    /// Client certificate, PEM bytes (wins over `cert_file`).
    pub cert_data: Vec<u8>,
    /// Its private key, PEM bytes (wins over `key_file`).
    pub key_data: Vec<u8>,
    /// CA certificates, PEM bytes (wins over `ca_file`).
    pub ca_data: Vec<u8>,
}

impl TlsConfig {
    /// Whether a CA is given (file or data).
    #[must_use]
    pub fn has_ca(&self) -> bool {
        !self.ca_file.is_empty() || !self.ca_data.is_empty()
    }
}

/// Why an exchange (or building a client) failed. Retrying may help for
/// `Timeout` and `Transport`; the others describe the configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The URL does not parse, or is not `http://` / `https://`.
    #[error("invalid URL {url:?}: {message}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// The TLS settings cannot be used (unreadable file, bad PEM, ...).
    #[error("TLS configuration: {0}")]
    Tls(String),
    /// No complete reply within the client's timeout.
    #[error("POST {url}: timed out after {timeout:?}")]
    Timeout {
        /// The URL.
        url: String,
        /// The deadline.
        timeout: Duration,
    },
    /// Connecting, TLS, or the HTTP exchange failed.
    #[error("POST {url}: {message}")]
    Transport {
        /// The URL.
        url: String,
        /// The cause (with its sources).
        message: String,
    },
    /// The reply body exceeded [`MAX_REPLY_BYTES`].
    #[error("POST {url}: reply larger than {MAX_REPLY_BYTES} bytes")]
    TooLarge {
        /// The URL.
        url: String,
    },
}

/// A reply: status code and the whole body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// The body.
    pub body: Bytes,
}

/// The process-wide I/O runtime every exchange runs on.
fn io() -> &'static tokio::runtime::Runtime {
    static IO: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("flotilla-http")
            .enable_all()
            .build()
            .expect("starting the HTTP I/O runtime")
    })
}

/// Runs `fut` on the I/O runtime and blocks the calling thread until it
/// ends. For synchronous callers (the scheduling thread, `simulate`); safe
/// from any thread, including one inside another runtime (it blocks that
/// thread, so async code should `.await` instead). `None` if the task
/// panicked.
pub fn run_blocking<T, F>(fut: F) -> Option<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    io().spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().ok()
}

type HyperClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A pooled JSON-over-HTTP(S) client with one deadline per exchange.
#[derive(Clone)]
pub struct JsonClient {
    client: HyperClient,
    timeout: Duration,
}

impl std::fmt::Debug for JsonClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonClient")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl JsonClient {
    /// A client for `http://` and `https://` URLs. `tls: None` verifies
    /// servers against the system's roots and presents no certificate.
    ///
    /// # Errors
    /// [`HttpError::Tls`] for unreadable or malformed PEM, a certificate
    /// without its key (or the reverse), or a bad `serverName`.
    pub fn new(tls: Option<&TlsConfig>, timeout: Duration) -> Result<Self, HttpError> {
        let default = TlsConfig::default();
        let tls = tls.unwrap_or(&default);
        let config = client_config(tls)?;
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_or_http();
        let builder = if tls.server_name.is_empty() {
            builder
        } else {
            let name = ServerName::try_from(tls.server_name.clone())
                .map_err(|e| HttpError::Tls(format!("serverName {:?}: {e}", tls.server_name)))?;
            builder.with_server_name_resolver(FixedServerNameResolver::new(name))
        };
        // TCP_NODELAY: a request's small writes must not wait for the
        // extender's delayed ACK (Nagle), up to 40 ms each.
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        let connector = builder.enable_http1().wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(JsonClient { client, timeout })
    }

    /// The deadline of each exchange.
    #[must_use]
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// POSTs `body` (JSON) to `url` with `Content-Type: application/json`.
    /// The exchange starts at once on the I/O runtime; the returned future
    /// (awaitable from any runtime) yields the reply, whatever its status.
    ///
    /// # Errors
    /// [`HttpError::Url`], [`HttpError::Timeout`], [`HttpError::Transport`],
    /// [`HttpError::TooLarge`].
    pub fn post(
        &self,
        url: &str,
        body: Vec<u8>,
    ) -> impl Future<Output = Result<Reply, HttpError>> + Send + 'static {
        let owned = url.to_owned();
        let request = parse_url(url).and_then(|uri| {
            Request::post(uri)
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "application/json")
                .body(Full::new(Bytes::from(body)))
                .map_err(|e| HttpError::Url {
                    url: owned.clone(),
                    message: e.to_string(),
                })
        });
        let started = request.map(|req| {
            let client = self.client.clone();
            let timeout = self.timeout;
            let url = owned.clone();
            io().spawn(async move {
                let exchange = async {
                    let resp = client
                        .request(req)
                        .await
                        .map_err(|e| HttpError::Transport {
                            url: url.clone(),
                            message: error_chain(&e),
                        })?;
                    let status = resp.status().as_u16();
                    let body = Limited::new(resp.into_body(), MAX_REPLY_BYTES)
                        .collect()
                        .await
                        .map_err(|e| {
                            if e.is::<http_body_util::LengthLimitError>() {
                                HttpError::TooLarge { url: url.clone() }
                            } else {
                                HttpError::Transport {
                                    url: url.clone(),
                                    message: error_chain(e.as_ref()),
                                }
                            }
                        })?
                        .to_bytes();
                    Ok(Reply { status, body })
                };
                match tokio::time::timeout(timeout, exchange).await {
                    Ok(r) => r,
                    Err(_) => Err(HttpError::Timeout {
                        url: url.clone(),
                        timeout,
                    }),
                }
            })
        });
        async move {
            match started {
                Err(e) => Err(e),
                Ok(task) => task.await.unwrap_or_else(|e| {
                    Err(HttpError::Transport {
                        url: owned,
                        message: format!("the HTTP task failed: {e}"),
                    })
                }),
            }
        }
    }

    /// [`JsonClient::post`], blocking the calling thread until the reply.
    ///
    /// # Errors
    /// As [`JsonClient::post`].
    pub fn post_blocking(&self, url: &str, body: Vec<u8>) -> Result<Reply, HttpError> {
        let fut = self.post(url, body);
        run_blocking(fut).unwrap_or_else(|| {
            Err(HttpError::Transport {
                url: url.to_owned(),
                message: "the HTTP task failed".into(),
            })
        })
    }
}

/// An `http://` or `https://` URL.
fn parse_url(url: &str) -> Result<Uri, HttpError> {
    let bad = |message: String| HttpError::Url {
        url: url.to_owned(),
        message,
    };
    if !url.contains("://") {
        return Err(bad(
            "no scheme: give http://host:port/... or https://...".into()
        ));
    }
    let uri: Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => return Err(bad(format!("scheme {other:?} is not http or https"))),
        None => {
            return Err(bad(
                "no scheme: give http://host:port/... or https://...".into()
            ));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("no host".into()));
    }
    Ok(uri)
}

/// Checks that `url` is an absolute `http://` or `https://` URL (for
/// configuration validation).
///
/// # Errors
/// What is wrong with it.
pub fn check_url(url: &str) -> Result<(), String> {
    parse_url(url).map(|_| ()).map_err(|e| match e {
        HttpError::Url { message, .. } => message,
        other => other.to_string(),
    })
}

/// An error with its sources, `": "`-joined (hyper's top-level messages,
/// e.g. "client error (Connect)", say little on their own).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// PEM bytes from `data`, else from the file `path`; `None` when neither
/// is set.
fn pem_source(data: &[u8], path: &str, what: &str) -> Result<Option<Vec<u8>>, HttpError> {
    if !data.is_empty() {
        return Ok(Some(data.to_vec()));
    }
    if path.is_empty() {
        return Ok(None);
    }
    std::fs::read(path)
        .map(Some)
        .map_err(|e| HttpError::Tls(format!("{what} {path:?}: {e}")))
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, HttpError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| HttpError::Tls(format!("{what}: {e}")))?;
    if certs.is_empty() {
        return Err(HttpError::Tls(format!("{what}: no PEM certificate found")));
    }
    Ok(certs)
}

fn client_config(tls: &TlsConfig) -> Result<rustls::ClientConfig, HttpError> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| HttpError::Tls(e.to_string()))?;
    let builder = if tls.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
    } else {
        let mut roots = RootCertStore::empty();
        match pem_source(&tls.ca_data, &tls.ca_file, "caFile")? {
            Some(pem) => {
                for cert in certificates(&pem, "CA certificates")? {
                    roots
                        .add(cert)
                        .map_err(|e| HttpError::Tls(format!("CA certificate: {e}")))?;
                }
            }
            None => {
                // The system's roots; ones that do not parse are skipped, as
                // Go's system pool does.
                let native = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(native.certs);
            }
        }
        builder.with_root_certificates(roots)
    };
    let cert = pem_source(&tls.cert_data, &tls.cert_file, "certFile")?;
    let key = pem_source(&tls.key_data, &tls.key_file, "keyFile")?;
    match (cert, key) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert), Some(key)) => {
            let chain = certificates(&cert, "client certificate")?;
            let key = PrivateKeyDer::from_pem_slice(&key)
                .map_err(|e| HttpError::Tls(format!("client key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| HttpError::Tls(format!("client certificate and key: {e}")))
        }
        (Some(_), None) => Err(HttpError::Tls(
            "a client certificate (certFile/certData) needs its key (keyFile/keyData)".into(),
        )),
        (None, Some(_)) => Err(HttpError::Tls(
            "a client key (keyFile/keyData) needs its certificate (certFile/certData)".into(),
        )),
    }
}

/// `insecure: true`: any server certificate is accepted (signatures are
/// still checked, so the handshake itself is sound).
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests;
