//! The hostile clients of the fault drills (`loadtest/scripts/drills.sh`):
//! each tries one way into a coordinator serving mutual TLS that must be
//! refused, and prints one JSON line per attempt:
//! `{"attack": ..., "refused": bool, "answer": "...", "ms": ...}`.
//!
//! | attack | what it does | refused by |
//! | --- | --- | --- |
//! | `plaintext` | `Register` over plain HTTP/2 | the TLS handshake |
//! | `no-certificate` | `Register` over TLS without a client certificate | the handshake (`no_certificate`) |
//! | `wrong-ca` | `Register` with a client certificate another CA signed | the handshake (`unknown_ca`, or `bad_certificate` when the CAs have the same name, as `deploy/gen-certs.sh` makes them) |
//! | `other-class` | `Register` for the online pool with the batch pool's certificate | `PermissionDenied` (`class`) |
//! | `forged-credential` | `Watch` and `ProposeBind` with a made-up session credential (malformed, and the live workers' ids with a guessed secret) | `Unauthenticated` (`session`) |
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
    let mut answers = Vec::new();
    let mut refused = true;
    // Not a credential at all, then the live workers' session ids (1 and 2:
    // they registered first) with a guessed secret: the secret is what
    // must be checked.
    for id in ["online-0", "1", "2"] {
        let forged = format!("{id}.{:032x}", 0x5eed_u128);
        match c
            .watch(pb::WatchRequest {
                worker_id: forged.clone(),
            })
            .await
        {
            Ok(_) => {
                refused = false;
                answers.push(format!("{id}: Watch accepted"));
            }
            Err(s) => answers.push(format!("{id}: Watch {:?}", s.code())),
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
                gpu_devices: 0,
            })
            .await
        {
            Ok(d) => {
                let d = d.into_inner();
                if d.outcome == i32::from(pb::BindOutcome::Bound) {
                    refused = false;
                }
                answers.push(format!(
                    "{id}: ProposeBind outcome {} {}",
                    d.outcome, d.reason
                ));
            }
            Err(s) => answers.push(format!("{id}: ProposeBind {:?}", s.code())),
        }
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
    let (mut proposals, mut tally) = (0, ForgeryTally::default());
    let mut answers = std::collections::BTreeMap::<String, usize>::new();
    // The last submitted first: the pods most likely still pending.
    for pod in workload.pods.iter().rev().step_by(step).take(args.forge) {
        proposals += 1;
        let mut probe = forge_one(&mut c, &id, pod, &node).await;
        if probe.0 && probe.2 == NOT_ASSIGNED {
            // Created just now, the pod may have been unknown at the report
            // (acknowledged) and known at the proposal: asked again, a
            // coordinator that lets reports in does so again.
            probe = forge_one(&mut c, &id, pod, &node).await;
        }
        let (report_accepted, bound, answer) = probe;
        tally.count(report_accepted, bound, &answer);
        *answers.entry(answer).or_default() += 1;
    }
    let ForgeryTally {
        granted,
        reports_let_in,
        pending_elsewhere,
    } = tally;
    Ok(Attempt {
        attack: "forged-proposal",
        refused: tally.refused(),
        answer: format!(
            "{granted}/{proposals} proposals granted, {reports_let_in} reports on pending pods accepted, {pending_elsewhere} pods met pending at another worker; proposals answered {answers:?}"
        ),
        took: start.elapsed(),
    })
}

/// One pod of the `forged-proposal` attack: a report, then a proposal on
/// `node`, by session `id`. Returns whether the report was accepted, whether
/// the proposal was answered bound, and its answer's [`answer_kind`].
///
/// A report about a pod already bound is acknowledged and dropped (a
/// worker's report may cross the pod's Binding), as is one about a pod the
/// coordinator has not seen yet; about a pending pod of another worker it
/// must be refused. The report goes first: a pod bound by then is still
/// bound when the proposal's answer says so.
async fn forge_one(
    c: &mut CoordinatorClient<Channel>,
    id: &str,
    pod: &k8s_openapi::api::core::v1::Pod,
    node: &str,
) -> (bool, bool, String) {
    let report = c
        .report_unschedulable(pb::UnschedulableReport {
            worker_id: id.to_owned(),
            pod: Some(pod_ref(pod)),
            message: "0/1 nodes are available: forged.".into(),
            ..Default::default()
        })
        .await;
    let (bound, answer) = match c
        .propose_bind(pb::BindProposal {
            worker_id: id.to_owned(),
            pod: Some(pod_ref(pod)),
            node_name: node.to_owned(),
            alternatives: Vec::new(),
            gpu_devices: 0,
        })
        .await
    {
        Ok(d) => {
            let d = d.into_inner();
            (
                d.outcome == i32::from(pb::BindOutcome::Bound),
                answer_kind(&d.reason),
            )
        }
        Err(s) => (false, format!("{:?}", s.code())),
    };
    (report.is_ok(), bound, answer)
}

/// What the `forged-proposal` attack met, pod by pod.
#[derive(Debug, Default, Clone, Copy)]
struct ForgeryTally {
    /// Proposals granted for pods the coordinator had not bound before.
    granted: usize,
    /// Reports accepted about pods pending at another worker.
    reports_let_in: usize,
    /// Pods found pending at another worker (the proposal refused as
    /// not assigned): what the attack is about.
    pending_elsewhere: usize,
}

impl ForgeryTally {
    /// One pod's report (`report_accepted`) and proposal (`bound`, and
    /// its answer's [`answer_kind`]). A report about a pod the coordinator
    /// does not hold pending (bound, granted, or not seen yet: the answer
    /// says "not pending") is acknowledged, rightly. A proposal naming the
    /// node a pod is bound to already is answered bound (the idempotent
    /// answer of a retry; nothing is written): that counts as granted only
    /// when the report, sent first, was refused, i.e. the pod was pending.
    fn count(&mut self, report_accepted: bool, bound: bool, answer: &str) {
        if answer == NOT_ASSIGNED {
            self.pending_elsewhere += 1;
            if report_accepted {
                self.reports_let_in += 1;
            }
        }
        if bound && !report_accepted {
            self.granted += 1;
        }
    }

    /// Refused: nothing let in, and the attack did meet pods pending at
    /// another worker (else it tested nothing).
    fn refused(self) -> bool {
        self.granted == 0 && self.reports_let_in == 0 && self.pending_elsewhere > 0
    }
}

const NOT_ASSIGNED: &str = "not assigned to this worker";

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The answers of a run where the coordinator refused everything: pods
    /// not seen yet, pending elsewhere, bound already (one on the node
    /// proposed).
    #[test]
    fn a_forgery_refused_throughout_is_refused() {
        let mut t = ForgeryTally::default();
        t.count(true, false, &answer_kind("pod default/p is not pending"));
        t.count(
            false,
            false,
            &answer_kind("pod default/p is not assigned to this worker"),
        );
        t.count(
            true,
            false,
            &answer_kind("pod default/p is already bound to node-7"),
        );
        t.count(true, true, &answer_kind(""));
        assert!(t.refused(), "{t:?}");
    }

    #[test]
    fn a_forgery_let_in_or_untested_is_not_refused() {
        let not_assigned = answer_kind("pod default/p is not assigned to this worker");
        let mut report_let_in = ForgeryTally::default();
        report_let_in.count(true, false, &not_assigned);
        assert!(!report_let_in.refused());
        let mut granted = ForgeryTally::default();
        granted.count(false, false, &not_assigned);
        granted.count(false, true, "");
        assert!(!granted.refused());
        // No pod met pending at another worker: nothing was tested.
        let mut untested = ForgeryTally::default();
        untested.count(
            true,
            false,
            &answer_kind("pod default/p is already bound to n"),
        );
        assert!(!untested.refused());
    }
}
