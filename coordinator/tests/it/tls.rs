//! Mutual TLS between the coordinator and its workers
//! (`flotilla_coordinator::tls`), with certificates made at test time
//! (`flotilla_shared::tls::ephemeral`): real workers with good client
//! certificates schedule; no certificate, another CA's, or a class the
//! certificate does not allow are refused (and counted); rotated server
//! certificates are served to new connections; plaintext is refused off
//! loopback.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use flotilla_coordinator::Coordinator;
use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_coordinator::server::{self, ServeError, ServeOptions};
use flotilla_coordinator::tls::ServerTls;
use flotilla_proto::v1 as pb;
use flotilla_proto::v1::coordinator_client::CoordinatorClient;
use flotilla_scheduler::Registry;
use flotilla_scheduler::worker::{self, WorkerConfig, WorkerStats};
use flotilla_shared::WorkloadClass;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};
use flotilla_shared::tls::ephemeral::{Ca, Issued};
use flotilla_shared::tls::{ClientTlsMaterial, Pem, ServerTlsMaterial};

use crate::{Harness, OUTCOME, STEP, default_profiles, node_of, wait_until, within};

/// `flotilla_refused_calls_total{method, reason}` now.
fn refusals(method: &str, reason: &str) -> u64 {
    flotilla_shared::metrics::metrics()
        .refused_calls
        .with_label_values(&[method, reason])
        .get()
}

/// A coordinator over `cluster` serving mutual TLS with `material` on
/// 127.0.0.1.
async fn serve(cluster: Arc<EmbeddedCluster>, material: ServerTlsMaterial) -> Harness {
    let options = ServeOptions {
        tls: Some(Arc::new(
            ServerTls::load(material).expect("the certificates load"),
        )),
        ..ServeOptions::default()
    };
    Harness::start_options(cluster.clone(), cluster, default_profiles(), options).await
}

fn server_material(ca: &Ca, server: &Issued) -> ServerTlsMaterial {
    ServerTlsMaterial {
        cert: Pem::inline("server cert", &server.cert_pem),
        key: Pem::inline("server key", &server.key_pem),
        client_ca: Pem::inline("client CA", ca.cert_pem()),
    }
}

/// A client trusting `ca_pem` for the server, presenting `identity`.
async fn connect(
    addr: SocketAddr,
    ca_pem: &str,
    identity: Option<&Issued>,
) -> Result<CoordinatorClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    if let Some(id) = identity {
        tls = tls.identity(Identity::from_pem(&id.cert_pem, &id.key_pem));
    }
    let ch = Endpoint::from_shared(format!("https://{addr}"))?
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(CoordinatorClient::new(ch))
}

async fn register(
    client: &mut CoordinatorClient<Channel>,
    class: pb::WorkloadClass,
) -> Result<pb::RegisterResponse, tonic::Status> {
    within(
        STEP,
        "Register",
        client.register(pb::RegisterRequest {
            worker_name: "w".into(),
            workload_class: class.into(),
            profiles_fingerprint: 0,
        }),
    )
    .await
    .map(tonic::Response::into_inner)
}

/// A new CA, and a coordinator over an empty cluster serving its
/// certificate for `localhost` and verifying clients against it.
async fn serve_with_new_ca() -> (Ca, Harness) {
    serve_with_new_ca_as("localhost").await
}

/// [`serve_with_new_ca`], the server certificate naming only `name`.
async fn serve_with_new_ca_as(name: &str) -> (Ca, Harness) {
    let ca = Ca::new("flotilla test CA").unwrap();
    let server = ca.server(&[name]).unwrap();
    let c = serve(
        Arc::new(EmbeddedCluster::new()),
        server_material(&ca, &server),
    )
    .await;
    (ca, c)
}

/// Asserts a client presenting `identity` is refused during the handshake,
/// counted under `TLS` / `reason`, and never becomes a worker.
async fn refused_and_counted(c: &Harness, ca: &Ca, identity: Option<&Issued>, reason: &str) {
    let before = refusals("TLS", reason);
    refused_at_handshake(c, ca, identity).await;
    wait_until(STEP, "the refusal counted", || {
        refusals("TLS", reason) > before
    })
    .await;
    assert_eq!(c.coordinator.live_workers(), 0);
}

/// Connects with `identity` and registers; the error's text, whichever
/// step refused (TLS 1.3 ends the handshake on the client's side before
/// the server has read the client's certificate, so a refusal may show at
/// the first call).
async fn refused_at_handshake(c: &Harness, ca: &Ca, identity: Option<&Issued>) -> String {
    match connect(c.addr, &ca.cert_pem(), identity).await {
        Err(e) => format!("{e:?}"),
        Ok(mut client) => match register(&mut client, pb::WorkloadClass::Online).await {
            Ok(r) => panic!("registered without a valid client certificate: {r:?}"),
            Err(s) => {
                assert_ne!(s.code(), tonic::Code::PermissionDenied, "{s}");
                s.to_string()
            }
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_with_good_client_certificates_schedule_pods() {
    let ca = Ca::new("flotilla test CA").unwrap();
    let server = ca.server(&["localhost", "127.0.0.1"]).unwrap();
    let cluster = Arc::new(EmbeddedCluster::new());
    for i in 0..3 {
        cluster
            .apply_node(
                NodeBuilder::new(&format!("n{i}"))
                    .cpu("4")
                    .memory("8Gi")
                    .pods(110)
                    .build(),
            )
            .unwrap();
    }
    let c = serve(cluster.clone(), server_material(&ca, &server)).await;

    let mut handles = Vec::new();
    let mut stats = Vec::new();
    for (name, class) in [
        ("online-0", WorkloadClass::Online),
        ("batch-0", WorkloadClass::Batch),
    ] {
        let cert = ca.worker(name, &[Some(class)]).unwrap();
        let mut cfg = WorkerConfig::new(&format!("https://{}", c.addr), name, class);
        cfg.tls = Some(ClientTlsMaterial {
            ca: Pem::inline("CA", ca.cert_pem()),
            identity: Some((
                Pem::inline("worker cert", &cert.cert_pem),
                Pem::inline("worker key", &cert.key_pem),
            )),
            // The certificate names localhost and 127.0.0.1: the address's
            // IP is checked unless this overrides it.
            server_name: None,
        });
        let st = Arc::new(WorkerStats::default());
        stats.push(st.clone());
        let token = c.token.clone();
        handles.push(tokio::spawn(async move {
            worker::run(cfg, &Registry::in_tree(), st, token).await
        }));
    }
    let coordinator = c.coordinator.clone();
    wait_until(STEP, "both workers registered over TLS", || {
        coordinator.live_workers() == 2
    })
    .await;
    wait_until(STEP, "both workers ready", || {
        stats.iter().all(|s| s.ready.load(Ordering::Acquire))
    })
    .await;
    for i in 0..20 {
        let class = if i % 2 == 0 { "online" } else { "batch" };
        cluster
            .create_pod(
                PodBuilder::new(&format!("p{i}"))
                    .cpu("100m")
                    .label("flotilla.io/workload-class", class)
                    .build(),
            )
            .unwrap();
    }
    let pods = cluster.clone();
    wait_until(OUTCOME, "every pod bound", || {
        pods.pods().iter().filter(|p| node_of(p).is_some()).count() == 20
    })
    .await;
    // Both pools did their share through their own certificate.
    assert!(stats.iter().all(|s| s.bound.load(Ordering::Relaxed) > 0));
    c.token.cancel();
    for h in handles {
        within(STEP, "worker stopping", h)
            .await
            .unwrap()
            .expect("worker ends cleanly");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_a_certificate_is_refused_at_the_handshake() {
    let (ca, c) = serve_with_new_ca().await;
    refused_and_counted(&c, &ca, None, "no_certificate").await;
    // A plaintext client gets nowhere either.
    let plain = CoordinatorClient::connect(format!("http://{}", c.addr)).await;
    if let Ok(mut client) = plain {
        register(&mut client, pb::WorkloadClass::Online)
            .await
            .expect_err("plaintext on a TLS port is refused");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_signed_by_another_ca_is_refused() {
    let (ca, c) = serve_with_new_ca().await;
    let other = Ca::new("someone else's CA").unwrap();
    let forged = other.worker("online-0", &[None]).unwrap();
    refused_and_counted(&c, &ca, Some(&forged), "unknown_ca").await;
    // The same name from the right CA is let in.
    let good = ca.worker("online-0", &[None]).unwrap();
    let mut client = connect(c.addr, &ca.cert_pem(), Some(&good)).await.unwrap();
    register(&mut client, pb::WorkloadClass::Online)
        .await
        .expect("the right CA's certificate registers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_certificate_may_not_register_online() {
    let (ca, c) = serve_with_new_ca().await;
    let batch = ca.worker("batch-7", &[Some(WorkloadClass::Batch)]).unwrap();
    let mut client = connect(c.addr, &ca.cert_pem(), Some(&batch)).await.unwrap();
    let before = refusals("Register", "class");
    let denied = register(&mut client, pb::WorkloadClass::Online)
        .await
        .expect_err("online is not the certificate's class");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied}");
    assert!(
        denied
            .message()
            .contains("\"batch-7\" allows the workload classes: batch; not online"),
        "{}",
        denied.message()
    );
    assert!(refusals("Register", "class") > before);
    // Its own class is fine, on the same connection.
    register(&mut client, pb::WorkloadClass::Batch)
        .await
        .expect("batch registers");
    // A certificate naming no class serves none.
    let none = ca.worker("classless", &[]).unwrap();
    let mut client = connect(c.addr, &ca.cert_pem(), Some(&none)).await.unwrap();
    let denied = register(&mut client, pb::WorkloadClass::Batch)
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    assert!(
        denied.message().contains("classes: none"),
        "{}",
        denied.message()
    );
}

/// Writes `text` to `path` as a Secret volume update does: a new file
/// renamed over the old one.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_server_certificates_are_served_to_new_connections() {
    let dir = scratch("rotation");
    let (cert, key, client_ca) = (dir.join("tls.crt"), dir.join("tls.key"), dir.join("ca.crt"));
    let old_ca = Ca::new("old server CA").unwrap();
    let workers_ca = Ca::new("workers CA").unwrap();
    let first = old_ca.server(&["localhost"]).unwrap();
    replace(&cert, &first.cert_pem);
    replace(&key, &first.key_pem);
    replace(&client_ca, &workers_ca.cert_pem());
    let c = serve(
        Arc::new(EmbeddedCluster::new()),
        ServerTlsMaterial::files(&cert, &key, &client_ca),
    )
    .await;
    let me = workers_ca.worker("w", &[None]).unwrap();
    let mut before = connect(c.addr, &old_ca.cert_pem(), Some(&me))
        .await
        .unwrap();
    register(&mut before, pb::WorkloadClass::Online)
        .await
        .unwrap();

    // A certificate from a new CA, written over the files.
    let new_ca = Ca::new("new server CA").unwrap();
    let second = new_ca.server(&["localhost"]).unwrap();
    replace(&key, &second.key_pem);
    replace(&cert, &second.cert_pem);
    let mut after = connect(c.addr, &new_ca.cert_pem(), Some(&me))
        .await
        .expect("a new connection is served the new certificate");
    register(&mut after, pb::WorkloadClass::Online)
        .await
        .unwrap();
    assert!(
        connect(c.addr, &old_ca.cert_pem(), Some(&me))
            .await
            .is_err(),
        "the old certificate is no longer served"
    );
    // The connection made before the rotation still works.
    register(&mut before, pb::WorkloadClass::Batch)
        .await
        .expect("established connections keep their session");

    // A rotation that cannot be used (garbage, or a key that does not
    // match) keeps the certificate that works.
    replace(&cert, "not a certificate");
    let mut still = connect(c.addr, &new_ca.cert_pem(), Some(&me))
        .await
        .expect("a bad file keeps the previous certificate");
    register(&mut still, pb::WorkloadClass::Online)
        .await
        .unwrap();
    replace(&cert, &old_ca.server(&["localhost"]).unwrap().cert_pem);
    let mut still = connect(c.addr, &new_ca.cert_pem(), Some(&me))
        .await
        .expect("a key that does not match keeps the previous certificate");
    register(&mut still, pb::WorkloadClass::Online)
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn plaintext_off_loopback_is_refused_without_insecure() {
    let coordinator = Arc::new(Coordinator::with_profiles(
        Arc::new(EmbeddedCluster::new()),
        default_profiles(),
    ));
    let token = CancellationToken::new();
    let Err(e) = server::start(coordinator.clone(), "0.0.0.0:0", token.clone()).await else {
        panic!("plaintext on 0.0.0.0 was served");
    };
    assert!(matches!(e, ServeError::Plaintext { .. }), "{e}");
    let text = e.to_string();
    for needle in [
        "0.0.0.0:",
        "not a loopback address",
        "--tls-cert",
        "--tls-client-ca",
        "--insecure",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
    let insecure = ServeOptions {
        insecure: true,
        ..ServeOptions::default()
    };
    let running = server::start_with(coordinator, "0.0.0.0:0", token.clone(), insecure)
        .await
        .expect("--insecure serves plaintext anywhere");
    assert!(running.addr.ip().is_unspecified());
    token.cancel();
}

#[test]
fn unusable_files_are_errors_naming_flag_and_file() {
    let dir = scratch("bad-files");
    let ca = Ca::new("ca").unwrap();
    let s = ca.server(&["localhost"]).unwrap();
    let other = ca.server(&["localhost"]).unwrap();
    let (cert, key, client_ca) = (dir.join("tls.crt"), dir.join("tls.key"), dir.join("ca.crt"));
    std::fs::write(&cert, &s.cert_pem).unwrap();
    std::fs::write(&key, &other.key_pem).unwrap();
    std::fs::write(&client_ca, "garbage").unwrap();
    let err = |c: &Path, k: &Path, a: &Path| {
        ServerTls::load(ServerTlsMaterial::files(c, k, a))
            .expect_err("refused")
            .to_string()
    };
    let missing = dir.join("missing.crt");
    let e = err(&missing, &key, &client_ca);
    assert!(
        e.starts_with(&format!(
            "--tls-cert {}: cannot read the file",
            missing.display()
        )),
        "{e}"
    );
    let e = err(&cert, &key, &client_ca);
    assert!(
        e.starts_with(&format!(
            "--tls-client-ca {}: no certificate",
            client_ca.display()
        )),
        "{e}"
    );
    std::fs::write(&client_ca, ca.cert_pem()).unwrap();
    let e = err(&cert, &key, &client_ca);
    assert!(
        e.starts_with(&format!(
            "--tls-key {}: cannot serve it with --tls-cert",
            key.display()
        )),
        "{e}"
    );
    let e = err(&cert, &cert, &client_ca);
    assert!(e.contains("no private key in the file"), "{e}");
    std::fs::write(&key, &s.key_pem).unwrap();
    ServerTls::load(ServerTlsMaterial::files(&cert, &key, &client_ca))
        .expect("the matching key loads");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A real worker of `class` dialling `https://<addr>` with the TLS files
/// in `dir` (`ca.crt`, `tls.crt`, `tls.key`), as `flotilla worker
/// --tls-ca/--tls-cert/--tls-key [--tls-server-name]` runs it.
fn spawn_file_worker(
    c: &Harness,
    dir: &Path,
    server_name: Option<&str>,
    connect_timeout: std::time::Duration,
) -> tokio::task::JoinHandle<Result<(), worker::WorkerError>> {
    let mut cfg = WorkerConfig::new(&format!("https://{}", c.addr), "w", WorkloadClass::Online);
    cfg.connect_timeout = connect_timeout;
    cfg.tls = Some(ClientTlsMaterial {
        ca: Pem::file("--tls-ca", dir.join("ca.crt")),
        identity: Some((
            Pem::file("--tls-cert", dir.join("tls.crt")),
            Pem::file("--tls-key", dir.join("tls.key")),
        )),
        server_name: server_name.map(str::to_owned),
    });
    let token = c.token.clone();
    tokio::spawn(async move {
        worker::run(
            cfg,
            &Registry::in_tree(),
            Arc::new(WorkerStats::default()),
            token,
        )
        .await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_reads_its_files_again_at_every_join_and_honours_the_server_name() {
    // The coordinator's certificate names only coordinator.internal: the
    // worker dials 127.0.0.1, so it needs the server name override.
    let (ca, c) = serve_with_new_ca_as("coordinator.internal").await;
    let dir = scratch("worker-files");
    let good = ca.worker("w", &[None]).unwrap();
    replace(&dir.join("ca.crt"), &ca.cert_pem());
    replace(&dir.join("tls.crt"), &good.cert_pem);
    replace(&dir.join("tls.key"), &good.key_pem);
    let short = std::time::Duration::from_millis(500);
    let err = within(STEP, "a worker without the override", async {
        spawn_file_worker(&c, &dir, None, short).await.unwrap()
    })
    .await
    .expect_err("the address's IP is not in the certificate");
    assert!(format!("{err:?}").contains("NotValidForName"), "{err:?}");

    // Files that cannot be used yet (another CA's certificate): the worker
    // keeps trying, reading them again each round, and joins once they
    // are replaced.
    let other = Ca::new("someone else's CA").unwrap();
    let stale = other.worker("w", &[None]).unwrap();
    replace(&dir.join("tls.crt"), &stale.cert_pem);
    replace(&dir.join("tls.key"), &stale.key_pem);
    let before = refusals("TLS", "unknown_ca");
    let handle = spawn_file_worker(
        &c,
        &dir,
        Some("coordinator.internal"),
        std::time::Duration::from_secs(20),
    );
    wait_until(STEP, "the stale certificate refused", || {
        refusals("TLS", "unknown_ca") > before + 1 || handle.is_finished()
    })
    .await;
    assert!(!handle.is_finished(), "{:?}", handle.await);
    assert_eq!(c.coordinator.live_workers(), 0);
    replace(&dir.join("tls.key"), &good.key_pem);
    replace(&dir.join("tls.crt"), &good.cert_pem);
    let coordinator = c.coordinator.clone();
    wait_until(STEP, "the worker joins with its new files", || {
        coordinator.live_workers() == 1
    })
    .await;
    c.token.cancel();
    within(STEP, "worker stopping", handle)
        .await
        .unwrap()
        .expect("the worker ends cleanly");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A session is tied to the certificate that registered it: another
/// worker's connection, with a good certificate of its own, cannot use
/// the credential (stolen from a log, say); its owner can.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_credential_is_refused_over_another_certificate() {
    let (ca, c) = serve_with_new_ca().await;
    let a = ca
        .worker("worker-a", &[Some(WorkloadClass::Online)])
        .unwrap();
    let b = ca
        .worker("worker-b", &[Some(WorkloadClass::Online)])
        .unwrap();
    let mut client_a = connect(c.addr, &ca.cert_pem(), Some(&a)).await.unwrap();
    let credential = register(&mut client_a, pb::WorkloadClass::Online)
        .await
        .expect("a registers")
        .worker_id;
    let mut client_b = connect(c.addr, &ca.cert_pem(), Some(&b)).await.unwrap();
    let before = refusals("Watch", "session");
    let stolen = within(
        STEP,
        "Watch with another's credential",
        client_b.watch(pb::WatchRequest {
            worker_id: credential.clone(),
        }),
    )
    .await
    .expect_err("the credential is a's");
    assert_eq!(stolen.code(), tonic::Code::Unauthenticated, "{stolen}");
    assert!(
        stolen.message().contains("another client certificate"),
        "{}",
        stolen.message()
    );
    assert!(refusals("Watch", "session") > before);
    within(
        STEP,
        "Watch with its own credential",
        client_a.watch(pb::WatchRequest {
            worker_id: credential,
        }),
    )
    .await
    .expect("a watches");
}
