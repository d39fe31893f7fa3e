//! The HTTP endpoint every Flotilla process can serve (`--metrics-listen`):
//!
//! | path | answer |
//! | --- | --- |
//! | `GET /metrics` | 200, [`crate::metrics::render`] (Prometheus text format 0.0.4) |
//! | `GET /healthz` | 200 `ok` while the process serves at all (liveness) |
//! | `GET /readyz` | 200 `ok` once the process is ready (the coordinator: every kind listed once; a worker: registered and replayed the coordinator's view), else 503 with why (readiness) |
//!
//! Anything else is 404. Plain HTTP/1.1 (hyper), served until the
//! shutdown future completes.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Whether the process is ready; `Err` says why not (shown by `/readyz`).
pub type Readiness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

fn answer(req: &Request<Incoming>, ready: &Readiness) -> Response<Full<Bytes>> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "GET only\n".into());
    }
    match req.uri().path() {
        "/metrics" => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            crate::metrics::render(),
        ),
        "/healthz" | "/livez" => reply(StatusCode::OK, TEXT, "ok\n".into()),
        "/readyz" => match ready() {
            Ok(()) => reply(StatusCode::OK, TEXT, "ok\n".into()),
            Err(why) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                format!("not ready: {why}\n"),
            ),
        },
        _ => reply(
            StatusCode::NOT_FOUND,
            TEXT,
            "not found: /metrics, /healthz, /readyz\n".into(),
        ),
    }
}

/// A running endpoint: its address, and the readiness it reports, which
/// can change (a coordinator replica waiting for its Lease is alive but not
/// ready; once it leads, its coordinator's readiness takes over).
#[derive(Clone)]
pub struct Endpoint {
    addr: std::net::SocketAddr,
    ready: Arc<parking_lot::RwLock<Readiness>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// Where it listens.
    #[must_use]
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Replaces what `/readyz` reports.
    pub fn set_readiness(&self, ready: Readiness) {
        *self.ready.write() = ready;
    }
}

/// Serves the endpoint on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, ready: Readiness, shutdown: impl Future<Output = ()>) {
    let slot = Arc::new(parking_lot::RwLock::new(ready));
    serve_slot(listener, slot, shutdown).await;
}

async fn serve_slot(
    listener: TcpListener,
    slot: Arc<parking_lot::RwLock<Readiness>>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => return,
            a = listener.accept() => a,
        };
        let Ok((tcp, _)) = accepted else {
            continue;
        };
        let slot = slot.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let ready = slot.read().clone();
                let resp = answer(&req, &ready);
                async move { Ok::<_, Infallible>(resp) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), svc)
                .await;
        });
    }
}

/// Binds `addr` and serves the endpoint in a task until `shutdown`
/// completes, reporting `ready` at `/readyz` (changeable through the
/// returned [`Endpoint`]).
///
/// # Errors
/// The address cannot be bound.
pub async fn start(
    addr: &str,
    ready: Readiness,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<Endpoint> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let slot = Arc::new(parking_lot::RwLock::new(ready));
    tokio::spawn(serve_slot(listener, slot.clone(), shutdown));
    Ok(Endpoint {
        addr: bound,
        ready: slot,
    })
}

/// A readiness that always says `why` (not ready).
#[must_use]
pub fn not_ready(why: &str) -> Readiness {
    let why = why.to_owned();
    Arc::new(move || Err(why.clone()))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn metrics_health_and_readiness() {
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        let ready: Readiness = Arc::new(move || {
            if f.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err("caches not synced".into())
            }
        });
        crate::metrics::metrics()
            .schedule_attempts
            .with_label_values(&["scheduled", "default-scheduler"])
            .inc();
        let stop = stop_signal();
        let endpoint = start("127.0.0.1:0", not_ready("starting"), stop.1)
            .await
            .expect("bind");
        let addr = endpoint.addr();
        // The endpoint answers GET; JsonClient only POSTs, so speak HTTP by hand.
        let get = |path: &str| {
            let path = path.to_owned();
            async move {
                use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
                s.write_all(
                    format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                )
                .await
                .expect("write");
                let mut out = String::new();
                s.read_to_string(&mut out).await.expect("read");
                out
            }
        };
        assert!(get("/readyz").await.contains("not ready: starting"));
        endpoint.set_readiness(ready);
        let m = get("/metrics").await;
        assert!(m.starts_with("HTTP/1.1 200"), "{m}");
        assert!(
            m.contains("scheduler_schedule_attempts_total{profile=\"default-scheduler\",result=\"scheduled\"}"),
            "{m}"
        );
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
        let not_ready = get("/readyz").await;
        assert!(not_ready.starts_with("HTTP/1.1 503"), "{not_ready}");
        assert!(not_ready.contains("not ready: caches not synced"));
        flag.store(true, Ordering::SeqCst);
        assert!(get("/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/nope").await.starts_with("HTTP/1.1 404"));
        let _ = stop.0.send(());
    }

    /// A sender and the future that completes when it sends (or drops).
    fn stop_signal() -> (
        tokio::sync::oneshot::Sender<()>,
        impl Future<Output = ()> + Send + 'static,
    ) {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        (tx, async move {
            let _ = rx.await;
        })
    }
}
