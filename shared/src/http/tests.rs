//! Loopback HTTP and HTTPS servers against [`JsonClient`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::*;
use crate::testing::http::{Canned, MockServer};

const TLS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/tls");

fn tls_file(name: &str) -> String {
    format!("{TLS_DIR}/{name}")
}

/// What the test server does with a request: reply after `delay` with
/// `status` and a body echoing the request's path, content type and body.
#[derive(Clone, Copy)]
struct Behaviour {
    delay: Duration,
    status: u16,
}

fn serve(b: Behaviour, tls: Option<Arc<rustls::ServerConfig>>) -> SocketAddr {
    MockServer::start_with(tls, move |req| {
        let echo = serde_json::json!({
            "path": req.path,
            "contentType": req.content_type,
            "body": String::from_utf8_lossy(&req.body),
        });
        Canned {
            status: b.status,
            body: echo.to_string().into_bytes(),
            delay: b.delay,
        }
    })
    .addr()
}

fn ok() -> Behaviour {
    Behaviour {
        delay: Duration::ZERO,
        status: 200,
    }
}

fn server_tls(require_client_cert: bool) -> Arc<rustls::ServerConfig> {
    let certs = CertificateDer::pem_file_iter(tls_file("server.pem"))
        .expect("server.pem")
        .collect::<Result<Vec<_>, _>>()
        .expect("certs");
    let key = PrivateKeyDer::from_pem_file(tls_file("server-key.pem")).expect("key");
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = if require_client_cert {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(tls_file("ca.pem")).expect("ca") {
            roots.add(c.expect("ca cert")).expect("add");
        }
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider(),
        )
        .build()
        .expect("client verifier");
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    Arc::new(builder.with_single_cert(certs, key).expect("server config"))
}

fn json(reply: &Reply) -> serde_json::Value {
    serde_json::from_slice(&reply.body).expect("json reply")
}

#[test]
fn posts_json_and_returns_the_reply_whatever_its_status() {
    let addr = serve(ok(), None);
    let c = JsonClient::new(None, Duration::from_secs(5)).expect("client");
    let r = c
        .post_blocking(&format!("http://{addr}/filter"), br#"{"Pod":{}}"#.to_vec())
        .expect("reply");
    assert_eq!(r.status, 200);
    let echo = json(&r);
    assert_eq!(echo["path"], "/filter");
    assert_eq!(echo["contentType"], "application/json");
    assert_eq!(echo["body"], r#"{"Pod":{}}"#);

    let failing = serve(
        Behaviour {
            status: 503,
            ..ok()
        },
        None,
    );
    let r = c
        .post_blocking(&format!("http://{failing}/x"), b"{}".to_vec())
        .expect("a 503 is a reply");
    assert_eq!(r.status, 503);
}

#[test]
fn the_deadline_covers_the_whole_exchange() {
    let addr = serve(
        Behaviour {
            delay: Duration::from_secs(3),
            ..ok()
        },
        None,
    );
    let c = JsonClient::new(None, Duration::from_millis(200)).expect("client");
    let started = Instant::now();
    let err = c
        .post_blocking(&format!("http://{addr}/slow"), b"{}".to_vec())
        .expect_err("times out");
    let waited = started.elapsed();
    assert!(
        matches!(err, HttpError::Timeout { timeout, .. } if timeout == Duration::from_millis(200)),
        "{err}"
    );
    assert!(waited < Duration::from_secs(2), "gave up after {waited:?}");
    assert!(err.to_string().contains("timed out after 200ms"), "{err}");
}

#[test]
fn unreachable_servers_and_bad_urls_are_errors_naming_the_url() {
    // A port nobody listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let c = JsonClient::new(None, Duration::from_secs(2)).expect("client");
    let url = format!("http://127.0.0.1:{port}/filter");
    let err = c.post_blocking(&url, b"{}".to_vec()).expect_err("refused");
    assert!(
        matches!(&err, HttpError::Transport { url: u, .. } if *u == url),
        "{err}"
    );
    assert!(err.to_string().to_lowercase().contains("refused"), "{err}");

    for (bad, why) in [
        ("127.0.0.1:80/filter", "no scheme"),
        ("ftp://host/filter", "scheme \"ftp\""),
        ("http:///filter", ""),
    ] {
        let err = c.post_blocking(bad, Vec::new()).expect_err(bad);
        assert!(matches!(err, HttpError::Url { .. }), "{bad}: {err}");
        assert!(err.to_string().contains(why), "{bad}: {err}");
        assert!(check_url(bad).is_err(), "{bad}");
    }
    assert!(check_url("https://extender.example:8443/scheduler").is_ok());
}

#[test]
fn tls_verifies_against_the_given_ca_and_server_name() {
    let addr = serve(ok(), Some(server_tls(false)));
    let url = format!("https://{}/filter", addr);
    let post = |tls: &TlsConfig| {
        JsonClient::new(Some(tls), Duration::from_secs(5))
            .expect("client")
            .post_blocking(&url, b"{}".to_vec())
    };
    // The system roots do not know our test CA.
    let err = post(&TlsConfig::default()).expect_err("unknown CA");
    assert!(err.to_string().contains("certificate"), "{err}");
    // With it (file or data), the certificate (issued for 127.0.0.1) passes.
    let with_ca = TlsConfig {
        ca_file: tls_file("ca.pem"),
        ..TlsConfig::default()
    };
    assert_eq!(post(&with_ca).expect("trusted").status, 200);
    let with_ca_data = TlsConfig {
        ca_data: std::fs::read(tls_file("ca.pem")).expect("ca"),
        ..TlsConfig::default()
    };
    assert_eq!(post(&with_ca_data).expect("trusted").status, 200);
    // serverName: checked instead of the URL's host.
    let named = TlsConfig {
        server_name: "extender.test".into(),
        ..with_ca.clone()
    };
    assert_eq!(post(&named).expect("name on the cert").status, 200);
    let misnamed = TlsConfig {
        server_name: "elsewhere.test".into(),
        ..with_ca
    };
    let err = post(&misnamed).expect_err("name not on the cert");
    assert!(err.to_string().contains("certificate"), "{err}");
    // insecure: anything goes.
    let insecure = TlsConfig {
        insecure: true,
        ..TlsConfig::default()
    };
    assert_eq!(post(&insecure).expect("unverified").status, 200);
}

#[test]
fn mutual_tls_presents_the_client_certificate() {
    let addr = serve(ok(), Some(server_tls(true)));
    let url = format!("https://{}/bind", addr);
    let base = TlsConfig {
        ca_file: tls_file("ca.pem"),
        ..TlsConfig::default()
    };
    let anonymous = JsonClient::new(Some(&base), Duration::from_secs(5)).expect("client");
    assert!(
        anonymous.post_blocking(&url, b"{}".to_vec()).is_err(),
        "a server requiring a client certificate refuses one without"
    );
    let with_cert = TlsConfig {
        cert_file: tls_file("client.pem"),
        key_file: tls_file("client-key.pem"),
        ..base
    };
    let c = JsonClient::new(Some(&with_cert), Duration::from_secs(5)).expect("client");
    assert_eq!(
        c.post_blocking(&url, b"{}".to_vec()).expect("mTLS").status,
        200
    );
}

#[test]
fn bad_tls_settings_are_configuration_errors() {
    let cases = [
        (
            TlsConfig {
                ca_file: "/nonexistent/ca.pem".into(),
                ..TlsConfig::default()
            },
            "caFile \"/nonexistent/ca.pem\"",
        ),
        (
            TlsConfig {
                ca_data: b"not pem".to_vec(),
                ..TlsConfig::default()
            },
            "CA certificates: no PEM certificate found",
        ),
        (
            TlsConfig {
                cert_file: tls_file("client.pem"),
                ..TlsConfig::default()
            },
            "needs its key",
        ),
        (
            TlsConfig {
                key_data: std::fs::read(tls_file("client-key.pem")).expect("key"),
                ..TlsConfig::default()
            },
            "needs its certificate",
        ),
        (
            TlsConfig {
                server_name: "not a name!".into(),
                ..TlsConfig::default()
            },
            "serverName",
        ),
    ];
    for (tls, want) in cases {
        let err = JsonClient::new(Some(&tls), Duration::from_secs(1)).expect_err(want);
        assert!(matches!(err, HttpError::Tls(_)), "{err}");
        assert!(err.to_string().contains(want), "{err} / want {want}");
    }
}

#[tokio::test]
async fn awaiting_from_another_runtime_and_blocking_inside_one_both_work() {
    let addr = serve(ok(), None);
    let c = JsonClient::new(None, Duration::from_secs(5)).expect("client");
    let url = format!("http://{addr}/prioritize");
    // Awaited on this test's current-thread runtime.
    assert_eq!(
        c.post(&url, b"[]".to_vec()).await.expect("awaited").status,
        200
    );
    // Blocking this runtime's only thread does not deadlock: the exchange
    // runs on the I/O runtime.
    assert_eq!(
        c.post_blocking(&url, b"[]".to_vec())
            .expect("blocked")
            .status,
        200
    );
    assert_eq!(run_blocking(async { 7 }), Some(7));
}
