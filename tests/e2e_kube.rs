//! End to end against a real API server: two `flotilla coordinator`
//! processes (leader-elected) and two `flotilla worker` processes, Nodes and
//! Pods created through the API.
//!
//! Coordinators and workers talk mutual TLS as `deploy/manifests/` deploys
//! them: certificates made by `deploy/gen-certs.sh` (openssl) for the run,
//! the coordinators given `--tls-cert/--tls-key/--tls-client-ca`, the
//! workers `https://` addresses and their class's client certificate.
//!
//! Checks: pods bound (no node over-committed) or `PodScheduled=False` with
//! the FitError message and a `FailedScheduling` Event; a pod of another
//! `schedulerName` untouched; one Lease holder, the standby not listening;
//! SIGKILL of the leader → the standby takes over; the Lease taken by
//! someone else → the leader exits 5; a new replica leads and the workers
//! find it; SIGTERM → the Lease is released. A second test runs `flotilla
//! explain` / `simulate --kubeconfig` on a pod that fits nowhere and checks
//! they name the rejecting plugin and the FitError line and write nothing.
//! A third runs `flotilla bench --kubeconfig` (and upstream kube-scheduler
//! beside it when `$K8S_BIN/kube-scheduler` exists). A fourth runs
//! VolumeBinding end to end (static PVs bound, claims provisioned) with a
//! stand-in for the PV controller and a provisioner, which the lab does
//! not run. A fifth places GPU shares per device and checks the devices
//! reach each pod, with its Binding, as `alibabacloud.com/gpu-index`. The
//! tests run one at a time.
//!
//! Runs only when `KUBECONFIG` is set (otherwise it says why and passes):
//! `.ci/e2e-kube` starts a throwaway kube-apiserver + etcd and runs it; see
//! the README for running it against another test cluster. Everything it
//! creates is named after a run id: a namespace `flotilla-e2e-<id>`, Nodes
//! `e2e-<id>-n<i>` (label `flotilla.io/e2e-run=<id>`, which the test pods
//! select, so no other node is used), a Lease in that namespace, and the
//! `schedulerName` `flotilla-e2e-<id>`, so it neither touches nor is touched
//! by anything else on the cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

/// Allocatable cpu of each test node, millicores.
const NODE_MILLI_CPU: u64 = 2000;
/// Test nodes.
const NODES: usize = 3;
/// Each test pod requests this much cpu, millicores.
const POD_MILLI_CPU: u64 = 500;
/// Lease duration of the coordinators, seconds.
const LEASE_SECONDS: u64 = 6;
/// Longest wait for any outcome.
const OUTCOME: Duration = Duration::from_secs(90);

/// One test at a time: the bench's schedulers see every node of the
/// cluster, and the explain test counts nodes.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The control channel's certificates for this run, made in `dir/tls` by
/// `deploy/gen-certs.sh` (openssl), the recipe `deploy/README.md` gives
/// operators: `ca.crt`, `coordinator.{crt,key}` (names include 127.0.0.1),
/// `worker-{online,batch}.{crt,key}`.
fn tls_files(dir: &Path) -> PathBuf {
    let out = dir.join("tls");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/gen-certs.sh");
    let o = Command::new("bash")
        .arg(&script)
        .arg(&out)
        .output()
        .expect("running deploy/gen-certs.sh (needs bash and openssl)");
    assert!(
        o.status.success(),
        "deploy/gen-certs.sh failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Child processes, killed when the test ends (pass or fail).
struct Procs {
    dir: PathBuf,
    children: Vec<(String, Child)>,
}

impl Procs {
    fn spawn(&mut self, name: &str, args: &[String]) {
        let out = std::fs::File::create(self.dir.join(format!("{name}.out"))).expect("log file");
        let err = std::fs::File::create(self.dir.join(format!("{name}.err"))).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        self.children.push((name.to_owned(), child));
    }

    fn child(&mut self, name: &str) -> &mut Child {
        &mut self
            .children
            .iter_mut()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no process {name}"))
            .1
    }

    /// The last lines of every log, for failure messages.
    fn logs(&self) -> String {
        let mut s = String::new();
        for (name, _) in &self.children {
            for ext in ["out", "err"] {
                let text = std::fs::read_to_string(self.dir.join(format!("{name}.{ext}")))
                    .unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = &lines[lines.len().saturating_sub(15)..];
                s.push_str(&format!("--- {name}.{ext} ---\n{}\n", tail.join("\n")));
            }
        }
        s
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits up to `limit` for process `name` to exit.
fn wait_exit(procs: &mut Procs, name: &str, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = procs.child(name).try_wait().expect("wait") {
            return s;
        }
        assert!(
            start.elapsed() < limit,
            "{name} did not exit within {limit:?}\n{}",
            procs.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn listening(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// Creates the run's namespace `ns`; the Namespaces API, for its deletion.
async fn create_namespace(c: &Client, ns: &str) -> Api<Namespace> {
    let namespaces: Api<Namespace> = Api::all(c.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace"),
        )
        .await
        .expect("creating the test namespace");
    namespaces
}

async fn client(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("KUBECONFIG readable");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig usable");
    Client::try_from(config).expect("client")
}

fn node(name: &str, run: &str) -> Node {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let cpu = format!("{}m", NODE_MILLI_CPU);
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "flotilla.io/e2e-run": run}},
        "status": {
            "capacity": {"cpu": cpu, "memory": "4Gi", "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": "4Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "fake node (flotilla e2e)", "lastHeartbeatTime": now, "lastTransitionTime": now}],
        },
    }))
    .expect("node")
}

fn pod(name: &str, run: &str, scheduler: &str, milli_cpu: u64) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "flotilla-e2e"}},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": {"flotilla.io/e2e-run": run},
            // No kubelet heartbeats: on a cluster with a node controller the
            // fake nodes turn not-ready; the pods do not mind.
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},
            ],
            "containers": [{"name": "c", "image": "pause",
                            "resources": {"requests": {"cpu": format!("{milli_cpu}m"), "memory": "64Mi"}}}],
        },
    }))
    .expect("pod")
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn pod_scheduled(p: &Pod) -> Option<(String, Option<String>, Option<String>)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn lease_holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

/// Polls `f` every 250 ms until it returns `Some`, failing with `what` and
/// the process logs after `limit`.
async fn eventually<T, F, Fut>(procs: &Procs, limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "{what}: not within {limit:?}\n{}",
            procs.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Runs `test` against the cluster of `KUBECONFIG` (its first file) on a
/// 2-thread runtime, one e2e test at a time (they share the cluster);
/// skipped with a message when `KUBECONFIG` is unset.
fn in_lab<F, Fut>(what: &str, test: F)
where
    F: FnOnce(std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(kubeconfig) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) else {
        eprintln!(
            "e2e_kube {what} skipped: KUBECONFIG is not set (run .ci/e2e-kube for a throwaway \
             API server, or point KUBECONFIG at a test cluster; see the README)"
        );
        return;
    };
    let kubeconfig = std::env::split_paths(&kubeconfig)
        .next()
        .expect("KUBECONFIG names a file");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(test(kubeconfig));
}

#[test]
fn coordinators_and_workers_schedule_a_real_cluster_and_fail_over() {
    in_lab("scheduling", |kubeconfig| async move {
        scenario(&kubeconfig).await
    });
}

/// One run's names and files: a run id (`<prefix><pid>-<seconds>`), the
/// namespace and schedulerName made from it, a log folder, and a
/// KubeSchedulerConfiguration with one profile named like the pods'
/// schedulerName, for every process of the run.
struct RunSetup {
    run: String,
    ns: String,
    scheduler: String,
    dir: PathBuf,
    config_file: String,
}

impl RunSetup {
    /// A new run; `what` names it on stderr.
    fn new(prefix: &str, what: &str) -> Self {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let run = format!("{prefix}{}-{}", std::process::id(), secs % 100_000);
        let scheduler = format!("flotilla-e2e-{run}");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("e2e-kube-{run}"));
        std::fs::create_dir_all(&dir).expect("log dir");
        let config_path = dir.join("scheduler-config.yaml");
        std::fs::write(
            &config_path,
            format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: {scheduler}\n"
            ),
        )
        .expect("writing the scheduler configuration");
        eprintln!("{what}: run {run}; logs in {}", dir.display());
        RunSetup {
            ns: format!("flotilla-e2e-{run}"),
            scheduler,
            config_file: config_path.display().to_string(),
            dir,
            run,
        }
    }
}

#[allow(clippy::too_many_lines)]
async fn scenario(kubeconfig: &Path) {
    let RunSetup {
        run,
        ns,
        scheduler,
        dir,
        config_file,
    } = RunSetup::new("", "e2e_kube");
    let lease = format!("flotilla-e2e-{run}");

    let c = client(kubeconfig).await;
    let namespaces = create_namespace(&c, &ns).await;
    let nodes: Api<Node> = Api::all(c.clone());
    let node_names: Vec<String> = (0..NODES).map(|i| format!("e2e-{run}-n{i}")).collect();
    for n in &node_names {
        nodes
            .create(&PostParams::default(), &node(n, &run))
            .await
            .expect("creating a node");
    }
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let leases: Api<Lease> = Api::namespaced(c.clone(), &ns);
    let events: Api<Event> = Api::namespaced(c.clone(), &ns);

    let mut procs = Procs {
        dir: dir.clone(),
        children: Vec::new(),
    };
    let (port_a, port_b) = (free_port(), free_port());
    let tls = tls_files(&dir);
    let tls_file = |name: &str| tls.join(name).display().to_string();
    let coordinator = |port: u16, id: &str| -> Vec<String> {
        [
            "coordinator",
            "--tls-cert",
            &tls_file("coordinator.crt"),
            "--tls-key",
            &tls_file("coordinator.key"),
            "--tls-client-ca",
            &tls_file("ca.crt"),
            "--kubeconfig",
            &kubeconfig.display().to_string(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--config",
            &config_file,
            "--leader-elect",
            "--lease-name",
            &lease,
            "--lease-namespace",
            &ns,
            "--lease-duration",
            &LEASE_SECONDS.to_string(),
            "--lease-identity",
            id,
        ]
        .iter()
        .map(ToString::to_string)
        .collect()
    };
    let (id_a, id_b, id_a2) = (format!("a-{run}"), format!("b-{run}"), format!("a2-{run}"));

    // Coordinator A first, so it is the leader; then B, the standby.
    procs.spawn("coordinator-a", &coordinator(port_a, &id_a));
    eventually(
        &procs,
        OUTCOME,
        "coordinator A leading and listening",
        || {
            let leases = leases.clone();
            let (lease, id) = (lease.clone(), id_a.clone());
            async move {
                (lease_holder(&leases, &lease).await == Some(id) && listening(port_a)).then_some(())
            }
        },
    )
    .await;
    procs.spawn("coordinator-b", &coordinator(port_b, &id_b));
    let coordinators = format!("https://127.0.0.1:{port_a},https://127.0.0.1:{port_b}");
    // Workers run the same configuration (the profile named like the pods'
    // schedulerName).
    spawn_workers(&mut procs, &tls, &coordinators, &config_file);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !listening(port_b),
        "the standby must not serve workers\n{}",
        procs.logs()
    );

    // 8 pods that fit (4 cpu of the 6), one that fits nowhere, one of
    // another scheduler.
    let pp = PostParams::default();
    let fitting: Vec<String> = (0..8).map(|i| format!("fit-{i}")).collect();
    for name in &fitting {
        pods.create(&pp, &pod(name, &run, &scheduler, POD_MILLI_CPU))
            .await
            .expect("creating a pod");
    }
    pods.create(
        &pp,
        &pod("too-big", &run, &scheduler, NODE_MILLI_CPU + 1000),
    )
    .await
    .expect("creating a pod");
    pods.create(&pp, &pod("not-ours", &run, "someone-else", POD_MILLI_CPU))
        .await
        .expect("creating a pod");

    let listed = eventually(
        &procs,
        OUTCOME,
        "every fitting pod bound and too-big unschedulable",
        || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&ListParams::default()).await.ok()?;
                let bound = list
                    .items
                    .iter()
                    .filter(|p| {
                        p.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with("fit-"))
                    })
                    .filter(|p| node_of(p).is_some())
                    .count();
                let big = list
                    .items
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some("too-big"))?;
                (bound == 8 && pod_scheduled(big).is_some()).then_some(list.items)
            }
        },
    )
    .await;
    let by_name: BTreeMap<String, Pod> = listed
        .into_iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
        .collect();
    for name in &fitting {
        let n = node_of(&by_name[name]).expect("bound");
        assert!(
            node_names.contains(&n),
            "{name} went to {n}, not a test node"
        );
        let (status, _, _) =
            pod_scheduled(&by_name[name]).expect("PodScheduled set by the API server");
        assert_eq!(status, "True", "{name}");
    }
    let (status, reason, message) = pod_scheduled(&by_name["too-big"]).expect("condition");
    assert_eq!(
        (status.as_str(), reason.as_deref()),
        ("False", Some("Unschedulable"))
    );
    let message = message.expect("a FitError message");
    assert!(
        message.starts_with("0/")
            && message.contains("nodes are available")
            && message.contains("Insufficient cpu"),
        "FitError message: {message:?}"
    );
    let not_ours = &by_name["not-ours"];
    assert_eq!(
        node_of(not_ours),
        None,
        "a pod of another scheduler was bound"
    );
    assert_eq!(
        pod_scheduled(not_ours),
        None,
        "a pod of another scheduler was touched"
    );

    // Events: FailedScheduling with the same message, Scheduled per bind.
    let evs = eventually(&procs, OUTCOME, "the Events", || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            let scheduled = list
                .items
                .iter()
                .filter(|e| e.reason.as_deref() == Some("Scheduled"))
                .count();
            let failed = list
                .items
                .iter()
                .any(|e| e.reason.as_deref() == Some("FailedScheduling"));
            (scheduled >= 8 && failed).then_some(list.items)
        }
    })
    .await;
    let failed = evs
        .iter()
        .find(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .expect("FailedScheduling");
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert_eq!(failed.action.as_deref(), Some("Scheduling"));
    assert_eq!(failed.note.as_deref(), Some(message.as_str()));
    assert_eq!(
        failed.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("too-big")
    );
    assert_eq!(
        failed.reporting_controller.as_deref(),
        Some("flotilla.io/scheduler")
    );
    for e in evs
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Scheduled"))
    {
        let pod = e
            .regarding
            .as_ref()
            .and_then(|r| r.name.clone())
            .expect("regarding");
        let node = node_of(&by_name[&pod]).expect("bound");
        assert_eq!(
            e.note.as_deref(),
            Some(format!("Successfully assigned {ns}/{pod} to {node}").as_str())
        );
    }
    assert_eq!(
        lease_holder(&leases, &lease).await.as_deref(),
        Some(id_a.as_str())
    );

    // Kill the leader outright; B takes the lease and binds what comes next.
    procs
        .child("coordinator-a")
        .kill()
        .expect("killing coordinator A");
    let _ = procs.child("coordinator-a").wait();
    let later: Vec<String> = (0..4).map(|i| format!("later-{i}")).collect();
    for name in &later {
        pods.create(&pp, &pod(name, &run, &scheduler, POD_MILLI_CPU))
            .await
            .expect("creating a pod");
    }
    eventually(
        &procs,
        OUTCOME,
        "coordinator B leading after A died",
        || {
            let leases = leases.clone();
            let (lease, id) = (lease.clone(), id_b.clone());
            async move { (lease_holder(&leases, &lease).await == Some(id)).then_some(()) }
        },
    )
    .await;
    let all = eventually(&procs, OUTCOME, "the later pods bound by B", || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await.ok()?;
            let bound = list
                .items
                .iter()
                .filter(|p| {
                    p.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("later-"))
                })
                .filter(|p| node_of(p).is_some())
                .count();
            (bound == 4).then_some(list.items)
        }
    })
    .await;
    assert_eq!(
        lease_holder(&leases, &lease).await.as_deref(),
        Some(id_b.as_str())
    );
    assert!(listening(port_b), "the new leader serves workers");

    // 12 pods of 500m on 3 nodes of 2 cpu: full, never over.
    let mut used: BTreeMap<String, u64> = BTreeMap::new();
    for p in &all {
        if let Some(n) = node_of(p) {
            *used.entry(n).or_default() += POD_MILLI_CPU;
        }
    }
    for (n, milli) in &used {
        assert!(
            *milli <= NODE_MILLI_CPU,
            "node {n} over-committed: {milli}m\n{}",
            procs.logs()
        );
    }
    assert_eq!(used.values().sum::<u64>(), 12 * POD_MILLI_CPU);
    let not_ours = all
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("not-ours"))
        .expect("still there");
    assert_eq!(node_of(not_ours), None);

    // Another holder takes the Lease: B stops at once and exits 5.
    let stolen = json!({"spec": {
        "holderIdentity": "e2e-intruder",
        "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(k8s_openapi::jiff::Timestamp::now()),
        "leaseDurationSeconds": 2,
    }});
    leases
        .patch(&lease, &PatchParams::default(), &Patch::Merge(&stolen))
        .await
        .expect("taking the lease");
    let status = wait_exit(&mut procs, "coordinator-b", Duration::from_secs(20));
    assert_eq!(
        status.code(),
        Some(5),
        "coordinator B after losing the lease\n{}",
        procs.logs()
    );

    // A new replica on A's address leads once the intruder's lease expires;
    // the workers find it.
    procs.spawn("coordinator-a2", &coordinator(port_a, &id_a2));
    eventually(&procs, OUTCOME, "coordinator A2 leading", || {
        let leases = leases.clone();
        let (lease, id) = (lease.clone(), id_a2.clone());
        async move { (lease_holder(&leases, &lease).await == Some(id)).then_some(()) }
    })
    .await;
    pods.delete(
        "fit-0",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("deleting fit-0");
    pods.create(&pp, &pod("last", &run, &scheduler, POD_MILLI_CPU))
        .await
        .expect("creating a pod");
    eventually(
        &procs,
        OUTCOME,
        "pod last bound by A2 in the room fit-0 left",
        || {
            let pods = pods.clone();
            async move { pods.get("last").await.ok().and_then(|p| node_of(&p)) }
        },
    )
    .await;

    // The leader freezes (SIGSTOP: a hung host) with a standby on B's
    // address: the standby takes the lease once it expires, the workers
    // leave the frozen leader (keepalive) and bind through the new one.
    // Woken, A2 writes nothing (its fence's deadline passed) and exits 5.
    let id_c = format!("c-{run}");
    procs.spawn("coordinator-c", &coordinator(port_b, &id_c));
    let a2 = procs.child("coordinator-a2").id();
    let signal = |sig: &str, pid: u32| {
        let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
    };
    signal("-STOP", a2);
    // Room for one more: fit-1 goes.
    pods.delete(
        "fit-1",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        },
    )
    .await
    .expect("deleting fit-1");
    pods.create(&pp, &pod("after-freeze", &run, &scheduler, POD_MILLI_CPU))
        .await
        .expect("creating a pod");
    let bound_at = eventually(
        &procs,
        OUTCOME,
        "pod after-freeze bound by C while A2 is frozen",
        || {
            let pods = pods.clone();
            async move {
                pods.get("after-freeze")
                    .await
                    .ok()
                    .and_then(|p| node_of(&p))
            }
        },
    )
    .await;
    assert_eq!(
        lease_holder(&leases, &lease).await.as_deref(),
        Some(id_c.as_str())
    );
    signal("-CONT", a2);
    let status = wait_exit(&mut procs, "coordinator-a2", Duration::from_secs(30));
    assert_eq!(
        status.code(),
        Some(5),
        "coordinator A2 woken after losing the lease\n{}",
        procs.logs()
    );
    let after = pods.get("after-freeze").await.expect("after-freeze");
    assert_eq!(
        node_of(&after),
        Some(bound_at),
        "bound once, where C put it"
    );
    let mut used: BTreeMap<String, u64> = BTreeMap::new();
    for p in pods.list(&ListParams::default()).await.expect("pods").items {
        if let Some(n) = node_of(&p) {
            *used.entry(n).or_default() += POD_MILLI_CPU;
        }
    }
    assert!(
        used.values().all(|m| *m <= NODE_MILLI_CPU),
        "over-committed after the freeze: {used:?}\n{}",
        procs.logs()
    );

    // A SIGTERM'd leader releases the lease and exits 0.
    let c = procs.child("coordinator-c").id();
    signal("-TERM", c);
    let status = wait_exit(&mut procs, "coordinator-c", Duration::from_secs(30));
    assert!(
        status.success(),
        "coordinator C exited with {status}\n{}",
        procs.logs()
    );
    assert_eq!(
        lease_holder(&leases, &lease).await,
        None,
        "the lease was released"
    );
    drop(procs);

    // Clean up what can be (the lab has no namespace controller).
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let _ = pods.delete_collection(&force, &ListParams::default()).await;
    for n in &node_names {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
}

/// `flotilla explain` / `simulate` with `--kubeconfig` on a pod that fits
/// nowhere: the output names the rejecting plugin and the FitError line, and
/// nothing is written (resourceVersions of the pod, the nodes and the
/// namespace unchanged, no Event). No scheduler serves the pod's
/// `schedulerName`, so nothing else touches it meanwhile.
#[test]
fn explain_reads_a_real_cluster_without_writing() {
    in_lab("explain", |kubeconfig| async move {
        explain_scenario(&kubeconfig).await
    });
}

/// The resourceVersion of an object.
fn rv<K: kube::Resource>(o: &K) -> String {
    o.meta().resource_version.clone().unwrap_or_default()
}

#[allow(clippy::too_many_lines)]
async fn explain_scenario(kubeconfig: &Path) {
    let RunSetup {
        run,
        ns,
        scheduler,
        dir,
        config_file: cfg,
    } = RunSetup::new("x", "e2e_kube explain");

    let c = client(kubeconfig).await;
    let namespaces = create_namespace(&c, &ns).await;
    let nodes: Api<Node> = Api::all(c.clone());
    let node_names: Vec<String> = (0..2).map(|i| format!("e2e-{run}-n{i}")).collect();
    for n in &node_names {
        nodes
            .create(&PostParams::default(), &node(n, &run))
            .await
            .expect("creating a node");
    }
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let pp = PostParams::default();
    // One bound pod (created with spec.nodeName) and one that fits nowhere.
    let mut held = pod("held", &run, &scheduler, POD_MILLI_CPU);
    held.spec.as_mut().expect("spec").node_name = Some(node_names[0].clone());
    pods.create(&pp, &held).await.expect("creating a pod");
    pods.create(
        &pp,
        &pod("too-big", &run, &scheduler, NODE_MILLI_CPU + 1000),
    )
    .await
    .expect("creating a pod");

    let before_pod = rv(&pods.get("too-big").await.expect("the pod"));
    let before_held = rv(&pods.get("held").await.expect("the pod"));
    let mut before_nodes = Vec::new();
    for n in &node_names {
        before_nodes.push(rv(&nodes.get(n).await.expect("a node")));
    }
    let before_ns = rv(&namespaces.get(&ns).await.expect("the namespace"));

    let flotilla = |args: &[&str]| {
        let started = Instant::now();
        let o = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .expect("running flotilla");
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        );
        std::fs::write(dir.join(format!("{}.out", args[0])), &out).expect("log");
        std::fs::write(dir.join(format!("{}.err", args[0])), &err).expect("log");
        eprintln!(
            "e2e_kube: flotilla {} took {:?}",
            args[0],
            started.elapsed()
        );
        assert!(
            o.status.success(),
            "flotilla {args:?}: {}\n{err}\n{out}",
            o.status
        );
        (out, err)
    };
    let kc = kubeconfig.display().to_string();
    let target = format!("{ns}/too-big");
    let (out, err) = flotilla(&["explain", &target, "--kubeconfig", &kc, "--config", &cfg]);

    // Both test nodes reject it for cpu (any other node of the cluster for
    // the node selector); the FitError line counts them.
    assert!(
        out.starts_with(&format!("explain {target} against cluster https://")),
        "{out}"
    );
    for n in &node_names {
        assert!(
            out.lines().any(|l| l.contains(n.as_str())
                && l.contains("NodeResourcesFit")
                && l.contains("Insufficient cpu")),
            "node {n} rejected by NodeResourcesFit for cpu:\n{out}"
        );
    }
    let fit_error = out
        .lines()
        .find_map(|l| l.strip_prefix("fits nowhere: "))
        .unwrap_or_else(|| panic!("a FitError line:\n{out}"));
    assert!(
        fit_error.starts_with("0/")
            && fit_error.contains(" nodes are available: ")
            && fit_error.contains("2 Insufficient cpu"),
        "FitError: {fit_error:?}"
    );
    assert!(err.contains("node(s)"), "summary on stderr: {err}");

    // simulate reads the same and reaches the same verdict for the pod.
    let (out, _) = flotilla(&[
        "simulate",
        "--kubeconfig",
        &kc,
        "--config",
        &cfg,
        "--output",
        "json",
    ]);
    let doc: serde_json::Value = serde_json::from_str(&out).expect("simulate JSON");
    let result = doc["results"]
        .as_array()
        .expect("results")
        .iter()
        .find(|r| r["pod"] == target.as_str())
        .unwrap_or_else(|| panic!("{target} in the results:\n{out}"));
    assert_eq!(result["status"], "Unschedulable");
    assert_eq!(result["message"], fit_error);
    assert_eq!(
        result["nodes"][&node_names[1]]["filter"]["plugin"],
        "NodeResourcesFit"
    );

    // Nothing written.
    let after = pods.get("too-big").await.expect("the pod");
    assert_eq!(rv(&after), before_pod, "the pod was written to");
    assert_eq!(node_of(&after), None);
    assert_eq!(
        pod_scheduled(&after),
        None,
        "the pod's status was written to"
    );
    assert_eq!(rv(&pods.get("held").await.expect("the pod")), before_held);
    for (n, before) in node_names.iter().zip(&before_nodes) {
        assert_eq!(
            &rv(&nodes.get(n).await.expect("a node")),
            before,
            "node {n}"
        );
    }
    assert_eq!(
        rv(&namespaces.get(&ns).await.expect("the namespace")),
        before_ns
    );
    let events: Api<Event> = Api::namespaced(c.clone(), &ns);
    let evs = events.list(&ListParams::default()).await.expect("events");
    assert!(evs.items.is_empty(), "Events written: {:?}", evs.items);

    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let _ = pods.delete_collection(&force, &ListParams::default()).await;
    for n in &node_names {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
}

/// `flotilla bench --kubeconfig` on a small kube-lab shape (10 nodes, 500
/// pods): every pod bound exactly once (one successful Binding each, by
/// the server's own counters), no node over-committed, the JSON keys, and
/// nothing left behind. With `$K8S_BIN/kube-scheduler` present, the same
/// again beside upstream kube-scheduler.
#[test]
fn bench_against_a_real_api_server() {
    in_lab("bench", |kubeconfig| async move {
        bench_scenario(&kubeconfig).await
    });
}

/// The checks of one scheduler's run in the bench report.
async fn check_bench_run(client: &Client, run: &serde_json::Value, pods: u64) {
    let who = run["scheduler"].as_str().expect("scheduler").to_owned();
    for key in [
        "scheduled",
        "podsPerSecondAvg",
        "podsPerSecondPeak",
        "apiWritesPerPod",
        "apiWrites",
        "secondsToAllBound",
        "checks",
        "cleanup",
        "runId",
    ] {
        assert!(run.get(key).is_some(), "{who}: no {key} in {run}");
    }
    assert_eq!(run["scheduled"], pods, "{who}: {run}");
    assert_eq!(run["timedOut"], false, "{who}");
    let c = &run["checks"];
    assert_eq!(c["podsBound"], pods, "{who}: {c}");
    assert_eq!(
        c["bindingsCreated"], pods,
        "{who}: one Binding per pod: {c}"
    );
    assert_eq!(c["overcommittedNodes"], 0, "{who}: {c}");
    assert_eq!(c["podsOnForeignNodes"], 0, "{who}: {c}");
    assert!(run["podsPerSecondAvg"].as_f64().expect("number") > 0.0);
    // At least the Binding per pod, counted by the server.
    assert!(
        run["apiWritesPerPod"].as_f64().expect("number") >= 1.0,
        "{who}: {run}"
    );
    assert_eq!(run["cleanup"]["podsLeft"], 0, "{who}");
    assert_eq!(run["cleanup"]["nodesLeft"], 0, "{who}");
    let sel = format!(
        "flotilla.io/bench-run={}",
        run["runId"].as_str().expect("runId")
    );
    let lp = ListParams::default().labels(&sel);
    let left_nodes = Api::<Node>::all(client.clone())
        .list_metadata(&lp)
        .await
        .expect("listing nodes");
    let left_pods = Api::<Pod>::all(client.clone())
        .list_metadata(&lp)
        .await
        .expect("listing pods");
    assert!(left_nodes.items.is_empty(), "{who}: nodes left");
    assert!(left_pods.items.is_empty(), "{who}: pods left");
}

async fn bench_scenario(kubeconfig: &Path) {
    let client = client(kubeconfig).await;
    let upstream = std::env::var_os("K8S_BIN")
        .map(|d| PathBuf::from(d).join("kube-scheduler"))
        .filter(|p| p.is_file());
    let kc = kubeconfig.display().to_string();
    let mut args: Vec<String> = [
        "bench",
        "--scenario",
        "kube-lab",
        "--scale",
        "0.1",
        "--kubeconfig",
        &kc,
        "--qps",
        "1000",
        "--burst",
        "2000",
        "--timeout",
        "120",
        "--output",
        "json",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    match &upstream {
        Some(bin) => {
            args.push("--upstream-scheduler".into());
            args.push(bin.display().to_string());
            if let Some(skc) = std::env::var_os("LAB_SCHEDULER_KUBECONFIG") {
                args.push("--upstream-kubeconfig".into());
                args.push(PathBuf::from(skc).display().to_string());
            }
        }
        None => eprintln!(
            "e2e_kube bench: no kube-scheduler in $K8S_BIN; the side-by-side part is skipped"
        ),
    }
    let started = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(&args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("running flotilla bench");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    eprintln!("e2e_kube: flotilla bench took {:?}", started.elapsed());
    assert!(
        o.status.success(),
        "flotilla bench: {}\n{err}\n{out}",
        o.status
    );
    let r: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    for key in [
        "scenario",
        "workers",
        "pods",
        "nodes",
        "qps",
        "burst",
        "serverVersion",
    ] {
        assert!(r.get(key).is_some(), "no {key} in {r}");
    }
    assert_eq!(r["scenario"], "kube-lab");
    assert_eq!(r["mode"], "api-server");
    assert_eq!(r["nodes"], 10);
    assert_eq!(r["pods"], 500);
    assert_eq!(r["scheduler"], "flotilla");
    check_bench_run(&client, &r, 500).await;
    // The coordinator counts its own writes too (at least the Bindings).
    assert!(
        r["ownApiWritesPerPod"].as_f64().expect("number") >= 1.0,
        "{r}"
    );
    if upstream.is_some() {
        let u = &r["upstream"];
        assert_eq!(u["scheduler"], "kube-scheduler", "{r}");
        assert_eq!(u["schedulerName"], "default-scheduler");
        check_bench_run(&client, u, 500).await;
        assert!(r["speedup"].as_f64().expect("number") > 0.0);
        eprintln!(
            "e2e_kube bench: flotilla {:.0} pods/s, {:.2} writes/pod; kube-scheduler {:.0} pods/s, {:.2} writes/pod",
            r["podsPerSecondAvg"].as_f64().unwrap_or(0.0),
            r["apiWritesPerPod"].as_f64().unwrap_or(0.0),
            u["podsPerSecondAvg"].as_f64().unwrap_or(0.0),
            u["apiWritesPerPod"].as_f64().unwrap_or(0.0),
        );
    } else {
        assert!(r.get("upstream").is_none());
    }
}

/// VolumeBinding end to end: nodes in two zones, StorageClasses of both
/// binding modes, static local PVs with node affinity (fewer than the
/// claims of their class), claims and pods using them. The coordinator's
/// PreBind writes the PVs' `claimRef` and the claims' `selected-node`;
/// the lab has no kube-controller-manager, so the test runs a stand-in for
/// the PV controller and a provisioner ([`volume_controllers`]) that
/// finishes what PreBind starts, as a cluster's controllers would.
///
/// Checks: every pod whose claims can be satisfied is bound to a node its
/// PVs reach, each static PV to exactly one claim and no PV to two; each
/// provisioned claim's `selected-node` is its pod's node, in the zone the
/// class allows, and its PV reaches that node; the pod left without a
/// local PV and the pod with an unbound `Immediate` claim stay
/// `PodScheduled=False` with upstream's reasons.
/// One coordinator (no leader election) and two workers, `online` and
/// `batch`, over mutual TLS with certificates made in `procs.dir`, all
/// running `config_file`.
fn spawn_coordinator_and_workers(procs: &mut Procs, kubeconfig: &Path, config_file: &str) {
    let port = free_port();
    let tls = tls_files(&procs.dir);
    let tls_file = |name: &str| tls.join(name).display().to_string();
    procs.spawn(
        "coordinator",
        &[
            "coordinator".into(),
            "--tls-cert".into(),
            tls_file("coordinator.crt"),
            "--tls-key".into(),
            tls_file("coordinator.key"),
            "--tls-client-ca".into(),
            tls_file("ca.crt"),
            "--kubeconfig".into(),
            kubeconfig.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--config".into(),
            config_file.into(),
        ],
    );
    spawn_workers(
        procs,
        &tls,
        &format!("https://127.0.0.1:{port}"),
        config_file,
    );
}

/// The two workers, `online` and `batch`, of `coordinators` (comma-separated
/// addresses) over mutual TLS with the certificates in `tls`, running
/// `config_file`.
fn spawn_workers(procs: &mut Procs, tls: &Path, coordinators: &str, config_file: &str) {
    let tls_file = |name: &str| tls.join(name).display().to_string();
    for (name, class) in [("worker-online", "online"), ("worker-batch", "batch")] {
        procs.spawn(
            name,
            &[
                "worker".into(),
                "--coordinator".into(),
                coordinators.into(),
                "--tls-ca".into(),
                tls_file("ca.crt"),
                "--tls-cert".into(),
                tls_file(&format!("worker-{class}.crt")),
                "--tls-key".into(),
                tls_file(&format!("worker-{class}.key")),
                "--class".into(),
                class.into(),
                "--config".into(),
                config_file.into(),
                "--name".into(),
                name.into(),
                "--connect-timeout".into(),
                "120".into(),
            ],
        );
    }
}

#[test]
fn volumes_are_bound_and_provisioned_on_a_real_api_server() {
    in_lab("volumes", |kubeconfig| async move {
        volumes_scenario(&kubeconfig).await
    });
}

/// The stand-in for kube-controller-manager's PV controller and for an
/// external provisioner of `provisioner`, over the PVs labelled
/// `flotilla.io/e2e-run=<run>` and the claims of `ns`, every 200 ms:
/// - a PV without `claimRef` and not `Available` becomes `Available` (the
///   PV controller's sync of an unbound volume);
/// - a PV whose `claimRef` names a claim that is not bound yet: the PV
///   `Bound`, then the claim's `spec.volumeName` and annotations, then the
///   claim `Bound` ([`pv_controller::completed`], in the PV controller's
///   order, through the status subresources);
/// - a claim with `volume.kubernetes.io/selected-node`, of a class whose
///   provisioner is `provisioner`, not bound and without a PV yet: the PV
///   a provisioner creates there ([`pv_controller::provisioned_pv`], with a
///   `local` volume source), completed by the
///   step above on the next round.
///
/// Errors (conflicts with the scheduler's writes) are retried on the next
/// round.
async fn volume_controllers(c: Client, ns: String, run: String, provisioner: String) {
    use flotilla_coordinator::cluster::{ClaimTarget, pv_controller};
    use flotilla_shared::volumes::model::{ANNOTATION_BIND_COMPLETED, ANNOTATION_SELECTED_NODE};
    use k8s_openapi::api::core::v1::{
        PersistentVolume, PersistentVolumeClaim, PersistentVolumeStatus,
    };
    use k8s_openapi::api::storage::v1::StorageClass;

    let pvs: Api<PersistentVolume> = Api::all(c.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), &ns);
    let classes: Api<StorageClass> = Api::all(c.clone());
    let nodes: Api<Node> = Api::all(c.clone());
    let ours = ListParams::default().labels(&format!("flotilla.io/e2e-run={run}"));
    let pp = PostParams::default();
    let annotation = |c: &PersistentVolumeClaim, key: &str| {
        c.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .cloned()
    };
    let is_bound = |c: &PersistentVolumeClaim| {
        c.spec
            .as_ref()
            .and_then(|s| s.volume_name.as_ref())
            .is_some()
            && annotation(c, ANNOTATION_BIND_COMPLETED).is_some()
    };
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (Ok(pv_list), Ok(claim_list)) = (
            pvs.list(&ours).await,
            claims.list(&ListParams::default()).await,
        ) else {
            continue;
        };
        for pv in &pv_list.items {
            let name = pv.metadata.name.clone().unwrap_or_default();
            let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
            if pv
                .spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_none()
            {
                if phase != Some("Available") {
                    let mut available = pv.clone();
                    available.status = Some(PersistentVolumeStatus {
                        phase: Some("Available".into()),
                        ..PersistentVolumeStatus::default()
                    });
                    if let Err(e) = pvs.replace_status(&name, &pp, &available).await {
                        eprintln!("e2e_kube volumes: PV {name} Available: {e}");
                    }
                }
                continue;
            }
            let Some(claim) = claim_list.items.iter().find(|c| {
                pv_controller::names_claim(
                    pv,
                    &ClaimTarget {
                        namespace: &ns,
                        name: c.metadata.name.as_deref().unwrap_or(""),
                        uid: c.metadata.uid.as_deref().unwrap_or(""),
                    },
                )
            }) else {
                continue;
            };
            if is_bound(claim) {
                continue;
            }
            let claim_name = claim.metadata.name.clone().unwrap_or_default();
            let (bound_pv, bound_claim) = pv_controller::completed(pv, claim);
            if phase != Some("Bound")
                && let Err(e) = pvs.replace_status(&name, &pp, &bound_pv).await
            {
                eprintln!("e2e_kube volumes: PV {name} Bound: {e}");
                continue;
            }
            let written = match claims.replace(&claim_name, &pp, &bound_claim).await {
                Ok(w) => w,
                Err(e) => {
                    eprintln!("e2e_kube volumes: claim {claim_name} bound to {name}: {e}");
                    continue;
                }
            };
            let mut with_status = written;
            with_status.status.clone_from(&bound_claim.status);
            if let Err(e) = claims.replace_status(&claim_name, &pp, &with_status).await {
                eprintln!("e2e_kube volumes: claim {claim_name} Bound: {e}");
            }
        }
        // The provisioner.
        for claim in &claim_list.items {
            let Some(node_name) = annotation(claim, ANNOTATION_SELECTED_NODE) else {
                continue;
            };
            let uid = claim.metadata.uid.clone().unwrap_or_default();
            if is_bound(claim)
                || pv_list
                    .items
                    .iter()
                    .any(|pv| pv.metadata.name.as_deref() == Some(&format!("pvc-{uid}")))
            {
                continue;
            }
            let Some(class) = pv_controller::class_of(claim) else {
                continue;
            };
            let Ok(Some(sc)) = classes.get_opt(class).await else {
                continue;
            };
            if sc.provisioner != provisioner {
                continue;
            }
            let Ok(node) = nodes.get(&node_name).await else {
                continue;
            };
            let mut pv = pv_controller::provisioned_pv(claim, &node);
            pv.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("flotilla.io/e2e-run".into(), run.clone());
            let name = pv.metadata.name.clone().unwrap_or_default();
            if let Err(e) = pvs.create(&pp, &pv).await {
                eprintln!("e2e_kube volumes: provisioning {name} on {node_name}: {e}");
            }
        }
    }
}

/// The hostnames a PV's node affinity admits (`kubernetes.io/hostname In`).
fn pv_hosts(pv: &k8s_openapi::api::core::v1::PersistentVolume) -> Vec<String> {
    pv.spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| {
            r.node_selector_terms
                .iter()
                .flat_map(|t| t.match_expressions.iter().flatten())
                .filter(|e| e.key == "kubernetes.io/hostname" && e.operator == "In")
                .flat_map(|e| e.values.iter().flatten().cloned())
                .collect()
        })
        .unwrap_or_default()
}

#[allow(clippy::too_many_lines)]
async fn volumes_scenario(kubeconfig: &Path) {
    use flotilla_shared::volumes::model::{ANNOTATION_BIND_COMPLETED, ANNOTATION_SELECTED_NODE};
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;

    const ZONE: &str = "topology.kubernetes.io/zone";
    let RunSetup {
        run,
        ns,
        scheduler,
        dir,
        config_file,
    } = RunSetup::new("v", "e2e_kube volumes");
    let started = Instant::now();

    let c = client(kubeconfig).await;
    let pp = PostParams::default();
    let namespaces = create_namespace(&c, &ns).await;

    // n0, n1 in zone a; n2, n3 in zone b.
    let nodes: Api<Node> = Api::all(c.clone());
    let node_names: Vec<String> = (0..4).map(|i| format!("e2e-{run}-n{i}")).collect();
    let zone_of = |i: usize| if i < 2 { "zone-a" } else { "zone-b" };
    for (i, n) in node_names.iter().enumerate() {
        let mut obj = node(n, &run);
        obj.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(ZONE.into(), zone_of(i).into());
        nodes.create(&pp, &obj).await.expect("creating a node");
    }

    // local: static PVs only; fast: provisioned, in zone b only; immediate:
    // bound by the PV controller before scheduling, which nothing here does.
    let classes: Api<StorageClass> = Api::all(c.clone());
    let (local, fast, immediate) = (
        format!("e2e-{run}-local"),
        format!("e2e-{run}-fast"),
        format!("e2e-{run}-immediate"),
    );
    let provisioner = format!("e2e-{run}.example.com/fake");
    for class in [
        json!({"metadata": {"name": local, "labels": {"flotilla.io/e2e-run": run}},
               "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}),
        json!({"metadata": {"name": fast, "labels": {"flotilla.io/e2e-run": run}},
               "provisioner": provisioner, "volumeBindingMode": "WaitForFirstConsumer",
               "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE, "values": ["zone-b"]}]}]}),
        json!({"metadata": {"name": immediate, "labels": {"flotilla.io/e2e-run": run}},
               "provisioner": format!("e2e-{run}.example.com/absent"), "volumeBindingMode": "Immediate"}),
    ] {
        classes
            .create(&pp, &serde_json::from_value(class).expect("class"))
            .await
            .expect("creating a StorageClass");
    }

    // Three local PVs, on n0 (zone a), n2 and n3 (zone b).
    let pvs: Api<PersistentVolume> = Api::all(c.clone());
    let static_pvs: Vec<(String, String)> = [0, 2, 3]
        .iter()
        .map(|&i| (format!("e2e-{run}-local-n{i}"), node_names[i].clone()))
        .collect();
    for (name, host) in &static_pvs {
        let pv = json!({
            "metadata": {"name": name, "labels": {"flotilla.io/e2e-run": run}},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": local,
                "local": {"path": format!("/mnt/disks/{name}")},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}]}},
            },
        });
        pvs.create(&pp, &serde_json::from_value(pv).expect("pv"))
            .await
            .expect("creating a PV");
    }

    // Claims: four local ones for three PVs (one is left without), two
    // fast ones, one immediate.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), &ns);
    let claim_class: Vec<(&str, &str)> = vec![
        ("local-0", local.as_str()),
        ("local-1", local.as_str()),
        ("local-2", local.as_str()),
        ("local-mixed", local.as_str()),
        ("fast-0", fast.as_str()),
        ("fast-mixed", fast.as_str()),
        ("imm-0", immediate.as_str()),
    ];
    for (name, class) in &claim_class {
        let claim = json!({
            "metadata": {"name": name},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": class,
                "resources": {"requests": {"storage": "5Gi"}},
            },
        });
        claims
            .create(&pp, &serde_json::from_value(claim).expect("claim"))
            .await
            .expect("creating a claim");
    }

    let controllers = tokio::spawn(volume_controllers(
        c.clone(),
        ns.clone(),
        run.clone(),
        provisioner.clone(),
    ));
    let mut procs = Procs {
        dir: dir.clone(),
        children: Vec::new(),
    };
    // The static PVs Available (the stand-in's first step) before any pod.
    eventually(&procs, OUTCOME, "the static PVs Available", || {
        let pvs = pvs.clone();
        let names: Vec<String> = static_pvs.iter().map(|(n, _)| n.clone()).collect();
        async move {
            for n in &names {
                let pv = pvs.get(n).await.ok()?;
                if pv.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Available") {
                    return None;
                }
            }
            Some(())
        }
    })
    .await;

    spawn_coordinator_and_workers(&mut procs, kubeconfig, &config_file);

    // Pod → its claims.
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    let pod_claims: Vec<(&str, Vec<&str>)> = vec![
        ("static-0", vec!["local-0"]),
        ("static-1", vec!["local-1"]),
        ("static-2", vec!["local-2"]),
        ("mixed", vec!["local-mixed", "fast-mixed"]),
        ("prov-0", vec!["fast-0"]),
        ("immediate", vec!["imm-0"]),
    ];
    for (name, uses) in &pod_claims {
        let mut p = pod(name, &run, &scheduler, POD_MILLI_CPU);
        let volumes = uses
            .iter()
            .map(|claim| json!({"name": claim, "persistentVolumeClaim": {"claimName": claim}}))
            .collect::<Vec<_>>();
        p.spec.as_mut().expect("spec").volumes =
            Some(serde_json::from_value(json!(volumes)).expect("volumes"));
        pods.create(&pp, &p).await.expect("creating a pod");
    }

    // Three of the four pods with a local claim bound (three PVs), prov-0
    // bound; the fourth and `immediate` unschedulable for their volumes.
    let local_pods = ["static-0", "static-1", "static-2", "mixed"];
    let listed = eventually(
        &procs,
        Duration::from_secs(120),
        "3 of the local pods and prov-0 bound, the others unschedulable for their volumes",
        || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&ListParams::default()).await.ok()?;
                let by_name: BTreeMap<String, Pod> = list
                    .items
                    .into_iter()
                    .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
                    .collect();
                let bound = |n: &str| by_name.get(n).and_then(node_of).is_some();
                let unschedulable_for = |n: &str, reason: &str| {
                    by_name
                        .get(n)
                        .and_then(pod_scheduled)
                        .is_some_and(|(s, _, m)| {
                            s == "False" && m.is_some_and(|m| m.contains(reason))
                        })
                };
                let local_bound = local_pods.iter().filter(|n| bound(n)).count();
                let local_left = local_pods
                    .iter()
                    .filter(|n| {
                        !bound(n)
                            && unschedulable_for(
                                n,
                                "node(s) didn't find available persistent volumes to bind",
                            )
                    })
                    .count();
                (local_bound == 3
                    && local_left == 1
                    && bound("prov-0")
                    && unschedulable_for(
                        "immediate",
                        "pod has unbound immediate PersistentVolumeClaims",
                    ))
                .then_some(by_name)
            }
        },
    )
    .await;
    eprintln!(
        "e2e_kube volumes: outcomes settled {:?} after the start",
        started.elapsed()
    );

    // Every claim and PV, after the stand-in's last round.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let claim_objs: BTreeMap<String, PersistentVolumeClaim> = claims
        .list(&ListParams::default())
        .await
        .expect("claims")
        .items
        .into_iter()
        .map(|c| (c.metadata.name.clone().unwrap_or_default(), c))
        .collect();
    let pv_objs: BTreeMap<String, PersistentVolume> = pvs
        .list(&ListParams::default().labels(&format!("flotilla.io/e2e-run={run}")))
        .await
        .expect("pvs")
        .items
        .into_iter()
        .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
        .collect();
    let annotation = |c: &PersistentVolumeClaim, key: &str| {
        c.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .cloned()
    };
    let volume_of = |c: &PersistentVolumeClaim| c.spec.as_ref().and_then(|s| s.volume_name.clone());
    let claim_ref = |pv: &PersistentVolume| {
        pv.spec
            .as_ref()
            .and_then(|s| s.claim_ref.as_ref())
            .map(|r| {
                (
                    r.namespace.clone().unwrap_or_default(),
                    r.name.clone().unwrap_or_default(),
                    r.uid.clone().unwrap_or_default(),
                )
            })
    };
    let node_zone = |n: &str| {
        let i = node_names.iter().position(|x| x == n).expect("a test node");
        zone_of(i)
    };
    let context = || {
        format!(
            "\nclaims: {claim_objs:#?}\npvs: {pv_objs:#?}\n{}",
            procs.logs()
        )
    };

    // No PV named by two claims; each claim's PV names it back.
    let mut taken: BTreeMap<String, String> = BTreeMap::new();
    for (name, claim) in &claim_objs {
        if let Some(pv) = volume_of(claim) {
            if let Some(other) = taken.insert(pv.clone(), name.clone()) {
                panic!("PV {pv} taken by claims {other} and {name}{}", context());
            }
            let pv_obj = pv_objs
                .get(&pv)
                .unwrap_or_else(|| panic!("claim {name}'s PV {pv} not found{}", context()));
            assert_eq!(
                claim_ref(pv_obj),
                Some((
                    ns.clone(),
                    name.clone(),
                    claim.metadata.uid.clone().unwrap_or_default()
                )),
                "PV {pv}'s claimRef{}",
                context()
            );
            assert_eq!(
                pv_obj.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Bound")
            );
            assert_eq!(
                annotation(claim, ANNOTATION_BIND_COMPLETED).as_deref(),
                Some("yes")
            );
        }
    }
    // Each static PV bound to exactly one claim; no PV's claimRef names a
    // claim bound elsewhere.
    for (pv, _) in &static_pvs {
        let (_, claim, _) = claim_ref(&pv_objs[pv])
            .unwrap_or_else(|| panic!("static PV {pv} bound to no claim{}", context()));
        assert_eq!(
            taken.get(pv),
            Some(&claim),
            "static PV {pv}: claimRef names {claim}{}",
            context()
        );
    }
    for (pv, obj) in &pv_objs {
        if let Some((_, claim, _)) = claim_ref(obj) {
            assert_eq!(taken.get(pv), Some(&claim), "PV {pv}{}", context());
        }
    }

    for (pod_name, uses) in &pod_claims {
        let p = &listed[*pod_name];
        let Some(node) = node_of(p) else {
            // Not bound: none of its claims started binding or provisioning.
            for claim in uses {
                let c = &claim_objs[*claim];
                assert_eq!(volume_of(c), None, "claim {claim} of unbound {pod_name}");
                assert_eq!(
                    annotation(c, ANNOTATION_SELECTED_NODE),
                    None,
                    "claim {claim} of unbound {pod_name}{}",
                    context()
                );
            }
            continue;
        };
        assert!(node_names.contains(&node), "{pod_name} went to {node}");
        for claim in uses {
            let c = &claim_objs[*claim];
            let pv = volume_of(c).unwrap_or_else(|| {
                panic!(
                    "claim {claim} of {pod_name} (on {node}) not bound{}",
                    context()
                )
            });
            let hosts = pv_hosts(&pv_objs[&pv]);
            assert_eq!(
                hosts,
                vec![node.clone()],
                "{pod_name} on {node}, its claim {claim}'s PV {pv} reaches {hosts:?}{}",
                context()
            );
            if claim.starts_with("fast-") {
                assert_eq!(
                    annotation(c, ANNOTATION_SELECTED_NODE).as_deref(),
                    Some(node.as_str()),
                    "selected-node of {claim}{}",
                    context()
                );
                assert_eq!(
                    pv,
                    format!("pvc-{}", c.metadata.uid.as_deref().unwrap_or("")),
                    "{claim} provisioned"
                );
                assert_eq!(node_zone(&node), "zone-b", "{pod_name}: allowedTopologies");
            } else {
                assert!(
                    static_pvs.iter().any(|(n, _)| n == &pv),
                    "local claim {claim} bound to {pv}, not a static PV"
                );
                assert_eq!(
                    annotation(c, ANNOTATION_SELECTED_NODE),
                    None,
                    "a static binding selects no node"
                );
            }
        }
        let (status, _, _) = pod_scheduled(p).expect("PodScheduled");
        assert_eq!(status, "True", "{pod_name}");
    }
    let imm = &claim_objs["imm-0"];
    assert_eq!(volume_of(imm), None);
    assert_eq!(annotation(imm, ANNOTATION_SELECTED_NODE), None);
    for name in local_pods.iter().chain(&["immediate"]) {
        if let Some((_, reason, message)) =
            pod_scheduled(&listed[*name]).filter(|(s, _, _)| s == "False")
        {
            assert_eq!(reason.as_deref(), Some("Unschedulable"), "{name}");
            eprintln!("e2e_kube volumes: {name}: {}", message.unwrap_or_default());
        }
    }
    eprintln!(
        "e2e_kube volumes: checks done {:?} after the start",
        started.elapsed()
    );

    controllers.abort();
    drop(procs);
    // Clean up what can be: claims and PVs carry protection finalizers
    // that only kube-controller-manager removes.
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let _ = pods.delete_collection(&force, &ListParams::default()).await;
    let no_finalizers = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    for name in claim_objs.keys() {
        let _ = claims.delete(name, &DeleteParams::default()).await;
        let _ = claims
            .patch(name, &PatchParams::default(), &no_finalizers)
            .await;
    }
    for name in pv_objs.keys() {
        let _ = pvs.delete(name, &DeleteParams::default()).await;
        let _ = pvs
            .patch(name, &PatchParams::default(), &no_finalizers)
            .await;
    }
    for class in [&local, &fast, &immediate] {
        let _ = classes.delete(class, &DeleteParams::default()).await;
    }
    for n in &node_names {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
}

#[test]
fn gpu_shares_are_placed_per_device_and_written_on_the_pod() {
    in_lab("gpu", |kubeconfig| async move {
        gpu_scenario(&kubeconfig).await
    });
}

/// The devices a bound pod holds, from the `alibabacloud.com/gpu-index`
/// annotation the API server copied from the Binding (`None`: absent).
fn gpu_index(p: &Pod) -> Option<Vec<usize>> {
    use flotilla_shared::gpu::dialect::ANNOTATION_GPU_INDEX;
    let text = p.metadata.annotations.as_ref()?.get(ANNOTATION_GPU_INDEX)?;
    Some(
        text.split('-')
            .map(|i| i.parse().unwrap_or_else(|_| panic!("gpu-index {text:?}")))
            .collect(),
    )
}

/// GpuShare against a real API server: two nodes of two GPUs each (plain
/// device plugin `nvidia.com/gpu`, models from `nvidia.com/gpu.product`);
/// pods created one after the other, each waited for:
/// - `whole`, two whole GPUs of model A100 (`nvidia.com/gpu: 2`,
///   `nvidia.com/use-gputype`) → the A100 node, devices 0 and 1;
/// - shares (trace annotations) of 600, 600, 400, 400 milli → the other
///   node, the two 600s on different devices and each 400 beside a 600;
/// - a 300 share → unschedulable, `PodScheduled=False` with the FitError
///   naming the share on both nodes;
/// - one 600 deleted → the 300 placed on the device it freed.
///
/// Each bound pod's `gpu-index` annotation must have come with its Binding
/// (checked when `spec.nodeName` is first seen), and no device holds more
/// than 1000 milli.
#[allow(clippy::too_many_lines)]
async fn gpu_scenario(kubeconfig: &Path) {
    use flotilla_shared::gpu::dialect::{
        ANNOTATION_GPU_MILLI, HAMI_USE_GPUTYPE, LABEL_GPU_PRODUCT,
    };
    let RunSetup {
        run,
        ns,
        scheduler,
        dir,
        config_file,
    } = RunSetup::new("g", "e2e_kube gpu");
    let c = client(kubeconfig).await;
    let pp = PostParams::default();
    let namespaces = create_namespace(&c, &ns).await;

    let nodes: Api<Node> = Api::all(c.clone());
    let (t4, a100) = (format!("e2e-{run}-t4"), format!("e2e-{run}-a100"));
    for (name, model) in [(&t4, "Tesla-T4"), (&a100, "A100")] {
        let mut obj = node(name, &run);
        obj.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(LABEL_GPU_PRODUCT.into(), model.into());
        let status = obj.status.as_mut().expect("status");
        for list in [&mut status.capacity, &mut status.allocatable] {
            list.get_or_insert_with(Default::default).insert(
                "nvidia.com/gpu".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()),
            );
        }
        nodes.create(&pp, &obj).await.expect("creating a node");
    }

    let mut procs = Procs {
        dir: dir.clone(),
        children: Vec::new(),
    };
    spawn_coordinator_and_workers(&mut procs, kubeconfig, &config_file);

    let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
    // Creates `p` and waits until it is bound; its node and devices.
    let place = |p: Pod| {
        let (pods, procs, pp) = (pods.clone(), &procs, &pp);
        async move {
            let name = p.metadata.name.clone().expect("name");
            pods.create(pp, &p).await.expect("creating a pod");
            eventually(procs, OUTCOME, &format!("{name} bound"), || {
                let (pods, name) = (pods.clone(), name.clone());
                async move {
                    let p = pods.get(&name).await.ok()?;
                    let node = node_of(&p)?;
                    let devices = gpu_index(&p).unwrap_or_else(|| {
                        panic!("{name} bound to {node} without its gpu-index: {p:?}")
                    });
                    Some((node, devices))
                }
            })
            .await
        }
    };
    let share = |name: &str, milli: u32| {
        let mut p = pod(name, &run, &scheduler, 100);
        p.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANNOTATION_GPU_MILLI.into(), milli.to_string());
        p
    };

    let mut whole = pod("whole", &run, &scheduler, 100);
    whole
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(HAMI_USE_GPUTYPE.into(), "A100".into());
    let gpus = json!({"nvidia.com/gpu": "2"});
    whole.spec.as_mut().expect("spec").containers[0].resources =
        Some(serde_json::from_value(json!({"requests": gpus, "limits": gpus})).expect("resources"));
    assert_eq!(place(whole).await, (a100.clone(), vec![0, 1]), "whole");

    let (n, a) = place(share("share-a", 600)).await;
    assert_eq!(n, t4, "share-a");
    let (n, b) = place(share("share-b", 600)).await;
    assert_eq!(n, t4, "share-b");
    assert_ne!(a, b, "the two 600 shares on one device");
    let mut small = Vec::new();
    for name in ["share-c", "share-d"] {
        let (n, d) = place(share(name, 400)).await;
        assert_eq!(n, t4, "{name}");
        small.push(d);
    }
    small.sort();
    let mut big = vec![a.clone(), b];
    big.sort();
    assert_eq!(small, big, "each 400 beside a 600");

    pods.create(&pp, &share("share-e", 300))
        .await
        .expect("creating share-e");
    let message = eventually(&procs, OUTCOME, "share-e unschedulable", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("share-e").await.ok()?;
            assert_eq!(node_of(&p), None, "share-e bound over a full GPU: {p:?}");
            pod_scheduled(&p)
                .filter(|(s, _, _)| s == "False")
                .and_then(|(_, _, m)| m)
        }
    })
    .await;
    assert!(
        message.contains("2 node(s) had no GPU with enough free share"),
        "{message}"
    );

    // At once (no kubelet here to finish a graceful deletion): a
    // terminating pod still holds its devices.
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete("share-a", &force)
        .await
        .expect("deleting share-a");
    let e = eventually(&procs, OUTCOME, "share-e bound once share-a left", || {
        let pods = pods.clone();
        async move {
            let p = pods.get("share-e").await.ok()?;
            let node = node_of(&p)?;
            Some((node, gpu_index(&p).expect("share-e's gpu-index")))
        }
    })
    .await;
    assert_eq!(e, (t4.clone(), a), "share-e on the device share-a freed");

    drop(procs);
    let _ = pods.delete_collection(&force, &ListParams::default()).await;
    for n in [&t4, &a100] {
        let _ = nodes.delete(n, &DeleteParams::default()).await;
    }
    let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
}
