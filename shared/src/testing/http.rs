//! A loopback HTTP(S) server for tests of extenders and placement
//! webhooks: every request is answered by a closure, after an optional
//! delay, and recorded.
//!
//! ```
//! use flotilla_shared::testing::http::{Canned, MockServer};
//!
//! let server = MockServer::start(|req| {
//!     assert_eq!(req.path, "/scheduler/filter");
//!     Canned::ok(r#"{"NodeNames": []}"#)
//! });
//! let url = server.url("/scheduler"); // http://127.0.0.1:PORT/scheduler
//! # let _ = url;
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// A request as the handler sees it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The URL path, e.g. `/scheduler/filter`.
    pub path: String,
    /// The `Content-Type` header (empty when absent).
    pub content_type: String,
    /// The whole body.
    pub body: Vec<u8>,
}

impl Received {
    /// The body as JSON (`Null` when it is not JSON).
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// The answer to one request.
#[derive(Debug, Clone)]
pub struct Canned {
    /// HTTP status.
    pub status: u16,
    /// Body.
    pub body: Vec<u8>,
    /// How long to wait before answering.
    pub delay: Duration,
}

impl Canned {
    /// 200 with `body`, at once.
    #[must_use]
    pub fn ok(body: &str) -> Self {
        Canned {
            status: 200,
            body: body.as_bytes().to_vec(),
            delay: Duration::ZERO,
        }
    }

    /// 200 with `value` as JSON, at once.
    #[must_use]
    pub fn json(value: &serde_json::Value) -> Self {
        Canned::ok(&value.to_string())
    }

    /// `status` with an empty body, at once.
    #[must_use]
    pub fn status(status: u16) -> Self {
        Canned {
            status,
            body: Vec::new(),
            delay: Duration::ZERO,
        }
    }

    /// The same answer after `delay`.
    #[must_use]
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

async fn answer<F>(
    req: Request<Incoming>,
    handler: Arc<F>,
    log: Arc<Mutex<Vec<Received>>>,
) -> Result<Response<Full<Bytes>>, Infallible>
where
    F: Fn(&Received) -> Canned + Send + Sync + 'static,
{
    let content_type = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let path = req.uri().path().to_owned();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let received = Received {
        path,
        content_type,
        body,
    };
    let canned = handler(&received);
    if let Ok(mut l) = log.lock() {
        l.push(received);
    }
    // A zero sleep still waits for the timer wheel's next tick (1 ms).
    if !canned.delay.is_zero() {
        tokio::time::sleep(canned.delay).await;
    }
    let resp = Response::builder()
        .status(canned.status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(canned.body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())));
    Ok(resp)
}

/// A running mock server (it serves until the process ends).
#[derive(Debug, Clone)]
pub struct MockServer {
    addr: SocketAddr,
    scheme: &'static str,
    log: Arc<Mutex<Vec<Received>>>,
}

impl MockServer {
    /// Serves plain HTTP on a loopback port, from a thread of its own.
    ///
    /// # Panics
    /// If no loopback port can be bound.
    #[must_use]
    pub fn start<F>(handler: F) -> Self
    where
        F: Fn(&Received) -> Canned + Send + Sync + 'static,
    {
        Self::start_with(None, handler)
    }

    /// Serves HTTPS with `tls` (or HTTP with `None`).
    ///
    /// # Panics
    /// If no loopback port can be bound.
    #[must_use]
    pub fn start_with<F>(tls: Option<Arc<rustls::ServerConfig>>, handler: F) -> Self
    where
        F: Fn(&Received) -> Canned + Send + Sync + 'static,
    {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let handler = Arc::new(handler);
        let log: Arc<Mutex<Vec<Received>>> = Arc::default();
        let server_log = log.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("mock-http".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("mock server runtime");
                rt.block_on(async move {
                    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                    tx.send(listener.local_addr().expect("addr"))
                        .expect("send addr");
                    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
                    loop {
                        let Ok((tcp, _)) = listener.accept().await else {
                            return;
                        };
                        let acceptor = acceptor.clone();
                        let handler = handler.clone();
                        let log = server_log.clone();
                        tokio::spawn(async move {
                            let svc =
                                service_fn(move |req| answer(req, handler.clone(), log.clone()));
                            let conn = hyper::server::conn::http1::Builder::new();
                            match acceptor {
                                None => {
                                    let _ = conn.serve_connection(TokioIo::new(tcp), svc).await;
                                }
                                Some(a) => {
                                    if let Ok(stream) = a.accept(tcp).await {
                                        let _ =
                                            conn.serve_connection(TokioIo::new(stream), svc).await;
                                    }
                                }
                            }
                        });
                    }
                });
            })
            .expect("mock server thread");
        let addr = rx.recv().expect("mock server address");
        MockServer { addr, scheme, log }
    }

    /// The server's address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` + `path`.
    #[must_use]
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// Every request received so far, in order.
    #[must_use]
    pub fn requests(&self) -> Vec<Received> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The requests to paths ending with `suffix` (e.g. `/filter`).
    #[must_use]
    pub fn requests_to(&self, suffix: &str) -> Vec<Received> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with(suffix))
            .collect()
    }
}
