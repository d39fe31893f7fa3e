//! The hostile clients of the fault drills (`loadtest/scripts/drills.sh`):
//! each tries one way into a coordinator serving mutual TLS that must be
//! refused, and prints one JSON line per attempt:
//! `{"attack": ..., "refused": bool, "answer": "...", "ms": ...}`.
//!
//! | attack | what it does | refused by |
//! | --- | --- | --- |
//! | `plaintext` | `Register` over plain HTTP/2 | the TLS handshake |
//! | `no-certificate` | `Register` over TLS without a client certificate | the handshake (`no_certificate`) |
//! | `wrong-ca` | `Register` with a client certificate another CA signed | the handshake (`unknown_ca`) |
//! | `other-class` | `Register` for the online pool with the batch pool's certificate | `PermissionDenied` (`class`) |
//! | `forged-credential` | `Watch` and `ProposeBind` with a made-up session credential | `Unauthenticated` (`session`) |
//! | `forged-proposal` | a registered worker with a valid certificate proposes Bindings, and reports, for `--forge` pods of the synthetic workload it was never handed | `not_assigned`: no grant, nothing written |
//!
//! Exit status: 0 when every attempt was refused, 1 when one was let in,
//! 2 on bad usage or unreadable files.
//!
//! ```sh
//! cargo run --release -p flotilla-loadtest --example drill_client -- \
//!   --coordinator https://127.0.0.1:7070 --certs target/drills/tls \
//!   --other-certs target/drills/tls-other --nodes 2000 --pods 60000
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use flotilla_loadtest::workload::synthetic;
use flotilla_proto::v1 as pb;
use pb::coordinator_client::CoordinatorClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Every call, connection included, is bounded: a refusal must come
/// quickly, and a hang is a failure of the drill too.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Parser)]
#[command(about = "Hostile clients for the fault drills")]
struct Args {
    /// The coordinator, `https://host:port`.
    #[arg(long)]
    coordinator: String,
    /// `deploy/gen-certs.sh` output the coordinator trusts (`ca.crt`,
    /// `worker-online.*`, `worker-batch.*`).
    #[arg(long)]
    certs: PathBuf,
    /// `deploy/gen-certs.sh` output of another CA.
    #[arg(long)]
    other_certs: PathBuf,
    /// Nodes of the coordinator's synthetic workload.
    #[arg(long)]
    nodes: usize,
    /// Pods of the coordinator's synthetic workload.
    #[arg(long)]
    pods: usize,
    /// Pods the `forged-proposal` attack proposes and reports.
    #[arg(long, default_value_t = 200)]
    forge: usize,
}

/// One attempt's line.
struct Attempt {
    attack: &'static str,
    refused: bool,
    answer: String,
    took: Duration,
}

impl Attempt {
    fn print(&self) {
        println!(
            "{}",
            serde_json::json!({
                "attack": self.attack,
                "refused": self.refused,
                "answer": self.answer,
                "ms": u64::try_from(self.took.as_millis()).unwrap_or(u64::MAX),
            })
        );
    }
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// TLS settings trusting `ca`, presenting `identity` (certificate, key)
/// when given.
fn tls(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<ClientTlsConfig, String> {
    let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
    if let Some((cert, key)) = identity {
        config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    Ok(config)
}

/// A client of `addr`, over TLS when `tls` is given. A refused handshake
/// is an error here or at the first call, depending on the TLS version's
/// order of messages.
async fn connect(
    addr: &str,
    tls: Option<ClientTlsConfig>,
) -> Result<CoordinatorClient<Channel>, String> {
    let mut ep = Endpoint::from_shared(addr.to_owned())
        .map_err(|e| format!("--coordinator {addr}: {e}"))?
        .connect_timeout(CALL_TIMEOUT)
        .timeout(CALL_TIMEOUT);
    if let Some(t) = tls {
        ep = ep.tls_config(t).map_err(|e| format!("TLS settings: {e}"))?;
    }
    let channel = ep.connect().await.map_err(|e| format!("connect: {e:?}"))?;
    Ok(CoordinatorClient::new(channel))
}

fn register_request(class: pb::WorkloadClass) -> pb::RegisterRequest {
    pb::RegisterRequest {
        worker_name: "drill-intruder".into(),
        workload_class: class.into(),
        profiles_fingerprint: 0,
    }
}

/// `Register` through a client made with `tls` (None: plaintext); refused
/// when the connection or the call fails.
async fn register_attempt(
    attack: &'static str,
    addr: &str,
    tls: Option<ClientTlsConfig>,
    class: pb::WorkloadClass,
) -> Attempt {
    let start = Instant::now();
    let (refused, answer) = match connect(addr, tls).await {
        Err(e) => (true, e),
        Ok(mut c) => match c.register(register_request(class)).await {
            Ok(r) => (false, format!("registered as {}", r.into_inner().worker_id)),
            Err(s) => (true, format!("{:?}: {}", s.code(), s.message())),
        },
    };
    Attempt {
        attack,
        refused,
        answer,
        took: start.elapsed(),
    }
}

fn pod_ref(pod: &k8s_openapi::api::core::v1::Pod) -> pb::PodRef {
    pb::PodRef {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
    }
}

/// `Watch` and `ProposeBind` under a credential Register never gave.
async fn forged_credential(addr: &str, certs: &Path) -> Result<Attempt, String> {
    let start = Instant::now();
    let mut c = connect(
        addr,
        Some(worker_tls(&certs.join("ca.crt"), certs, "online")?),
    )
    .await?;
    let forged = format!("online-0.{:032x}", 0x5eed_u128);
    let mut answers = Vec::new();
    let mut refused = true;
    match c
        .watch(pb::WatchRequest {
            worker_id: forged.clone(),
        })
        .await
    {
        Ok(_) => {
            refused = false;
            answers.push("Watch accepted".to_owned());
        }
        Err(s) => answers.push(format!("Watch {:?}", s.code())),
    }
    match c
        .propose_bind(pb::BindProposal {
            worker_id: forged,
            pod: Some(pb::PodRef {
                namespace: "default".into(),
                name: "pod-00000".into(),
                uid: String::new(),
            }),
            node_name: "node-00000".into(),
            alternatives: Vec::new(),
        })
        .await
    {
        Ok(d) => {
            let d = d.into_inner();
            if d.outcome == i32::from(pb::BindOutcome::Bound) {
                refused = false;
            }
            answers.push(format!("ProposeBind outcome {} {}", d.outcome, d.reason));
        }
        Err(s) => answers.push(format!("ProposeBind {:?}", s.code())),
    }
    Ok(Attempt {
        attack: "forged-credential",
        refused,
        answer: answers.join("; "),
        took: start.elapsed(),
    })
}

/// A worker with a valid certificate and session, but never watching (so
/// never handed a pod), proposes Bindings and reports for pods of the
/// workload: each must be refused.
async fn forged_proposal(addr: &str, certs: &Path, args: &Args) -> Result<Attempt, String> {
    let start = Instant::now();
    let mut c = connect(
        addr,
        Some(worker_tls(&certs.join("ca.crt"), certs, "online")?),
    )
    .await?;
    let id = c
        .register(register_request(pb::WorkloadClass::Online))
        .await
        .map_err(|s| format!("Register with a valid certificate: {s:?}"))?
        .into_inner()
        .worker_id;
    let workload = synthetic::scheduling_basic(args.nodes, args.pods);
    let node = workload
        .nodes
        .first()
        .and_then(|n| n.metadata.name.clone())
        .unwrap_or_default();
    let step = (args.pods / args.forge.max(1)).max(1);
    let (mut granted, mut proposals, mut reports_let_in) = (0, 0, 0);
    let mut answers = std::collections::BTreeMap::<String, usize>::new();
    // The last submitted first: the pods most likely still pending.
    for pod in workload.pods.iter().rev().step_by(step).take(args.forge) {
        proposals += 1;
        // A report about a pod already bound is acknowledged and dropped
        // (a worker's report may cross the pod's Binding); about a pending
        // pod of another worker it must be refused. The report goes first:
        // a pod bound by then is still bound when the proposal's answer
        // says so.
        let report = c
            .report_unschedulable(pb::UnschedulableReport {
                worker_id: id.clone(),
                pod: Some(pod_ref(pod)),
                message: "0/1 nodes are available: forged.".into(),
                ..Default::default()
            })
            .await;
        let answer = match c
            .propose_bind(pb::BindProposal {
                worker_id: id.clone(),
                pod: Some(pod_ref(pod)),
                node_name: node.clone(),
                alternatives: Vec::new(),
            })
            .await
        {
            Ok(d) => {
                let d = d.into_inner();
                if d.outcome == i32::from(pb::BindOutcome::Bound) {
                    granted += 1;
                }
                answer_kind(&d.reason)
            }
            Err(s) => format!("{:?}", s.code()),
        };
        if report.is_ok() && answer != ALREADY_BOUND {
            reports_let_in += 1;
        }
        *answers.entry(answer).or_default() += 1;
    }
    Ok(Attempt {
        attack: "forged-proposal",
        refused: granted == 0 && reports_let_in == 0,
        answer: format!(
            "{granted}/{proposals} proposals granted, {reports_let_in} reports on pending pods accepted; proposals answered {answers:?}"
        ),
        took: start.elapsed(),
    })
}

const ALREADY_BOUND: &str = "already bound";

/// A proposal's refusal without its pod and node names: "pod default/p
/// is already bound to node-1" is "already bound".
fn answer_kind(reason: &str) -> String {
    let what = reason.split_once(" is ").map_or(reason, |(_, w)| w);
    if what.starts_with("already bound") {
        ALREADY_BOUND.to_owned()
    } else {
        what.to_owned()
    }
}

/// TLS settings trusting `ca` and presenting the `worker-<class>`
/// certificate of the `gen-certs.sh` output `dir`.
fn worker_tls(ca: &Path, dir: &Path, class: &str) -> Result<ClientTlsConfig, String> {
    let cert = dir.join(format!("worker-{class}.crt"));
    let key = dir.join(format!("worker-{class}.key"));
    tls(ca, Some((&cert, &key)))
}

async fn attacks(args: &Args) -> Result<Vec<Attempt>, String> {
    use pb::WorkloadClass::Online;
    let addr = args.coordinator.as_str();
    let ca = args.certs.join("ca.crt");
    let plain = addr.replacen("https://", "http://", 1);
    let no_certificate = tls(&ca, None)?;
    let wrong_ca = worker_tls(&ca, &args.other_certs, "online")?;
    let other_class = worker_tls(&ca, &args.certs, "batch")?;
    Ok(vec![
        register_attempt("plaintext", &plain, None, Online).await,
        register_attempt("no-certificate", addr, Some(no_certificate), Online).await,
        register_attempt("wrong-ca", addr, Some(wrong_ca), Online).await,
        register_attempt("other-class", addr, Some(other_class), Online).await,
        forged_credential(addr, &args.certs).await?,
        forged_proposal(addr, &args.certs, args).await?,
    ])
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match attacks(&args).await {
        Ok(attempts) => {
            for a in &attempts {
                a.print();
            }
            if attempts.iter().all(|a| a.refused) {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("drill_client: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
