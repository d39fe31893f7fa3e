//! `flotilla simulate` and `flotilla explain` as processes: exit codes,
//! stdout (JSON and tables) and stderr (warnings, skipped pods, errors).
//! Expected placements are derived in `loadtest/tests/it/simulate.rs`; with
//! the default profile the same nodes win by a wide margin.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("loadtest/tests/fixtures")
        .join(name)
}

fn flotilla(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run flotilla")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A file with `text`, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("flotilla-cli-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[test]
fn simulate_json_places_pods_in_turn() {
    let small = fixture("simulate-small.yaml");
    let o = flotilla(&[
        "simulate",
        "--cluster",
        small.to_str().expect("path"),
        "--output",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: Value = serde_json::from_str(&stdout(&o)).expect("stdout is one JSON document");
    let results = doc["results"].as_array().expect("results");
    let got: Vec<(&str, &str, &Value)> = results
        .iter()
        .map(|r| {
            (
                r["pod"].as_str().unwrap_or_default(),
                r["status"].as_str().unwrap_or_default(),
                &r["node"],
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("default/web-1", "Scheduled", &Value::from("node-2")),
            ("default/web-2", "Scheduled", &Value::from("node-4")),
            ("default/big", "Unschedulable", &Value::Null),
        ]
    );
    assert_eq!(
        results[2]["message"],
        // Every node is unresolvable for big (a taint, or a request beyond
        // allocatable): preemption cannot help.
        "0/4 nodes are available: 1 node(s) had untolerated taint(s), 3 Insufficient cpu. \
         preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    );
    assert_eq!(
        results[0]["nodes"]["node-1"]["filter"]["reasons"][0],
        "Insufficient cpu"
    );
    assert!(
        stderr(&o).contains("simulate-small: 4 node(s), 6 pod(s) (3 bound, 3 pending)"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn simulate_table_on_a_kubectl_snapshot_lists_skipped_pods_on_stderr() {
    let snapshot = fixture("kubectl-get-nodes-pods.yaml");
    let o = flotilla(&["simulate", "--cluster", snapshot.to_str().expect("path")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let headlines: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.is_empty())
        .collect();
    assert_eq!(
        headlines,
        [
            "default/analytics-db-1: Scheduled on kind-worker  (priority 0, profile default-scheduler)",
            "default/web-5d4f8b7c9d-pq8rs: Scheduled on kind-worker2  (priority 0, profile default-scheduler)",
            "ml/trainer-0: Unschedulable  (priority 0, profile default-scheduler)",
        ]
    );
    let cordoned: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("kind-worker3 "))
        .map(|l| l.split_whitespace().collect())
        .collect();
    let rejected = [
        "kind-worker3",
        "NodeUnschedulable",
        "UnschedulableAndUnresolvable",
        "node(s)",
        "were",
        "unschedulable",
    ];
    assert_eq!(cordoned, [rejected; 3], "one row per pod: {out}");
    assert!(
        stderr(&o).contains(
            "skipped: pod batch/sim-job-0: spec.schedulerName \"volcano\" has no profile"
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn explain_shows_one_pod_against_bound_pods_only() {
    let small = fixture("simulate-small.yaml");
    let o = flotilla(&[
        "explain",
        "default/web-2",
        "--cluster",
        small.to_str().expect("path"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    // simulate puts web-1 on node-2 first and web-2 then goes to node-4;
    // explain places no other pending pod, so node-2 has room and wins.
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("would pick: node-2 (total score "),
        "{out}"
    );
    assert!(out.contains("node-3  TaintToleration"), "{out}");

    let o = flotilla(&["explain", "big", "--cluster", small.to_str().expect("path")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).lines().last(),
        Some(
            "fits nowhere: 0/4 nodes are available: 1 node(s) had untolerated taint(s), \
             3 Insufficient cpu. preemption: 0/4 nodes are available: 4 Preemption is not \
             helpful for scheduling."
        )
    );
}

#[test]
fn unknown_kinds_are_warned_about_on_stderr() {
    let f = TempFile::new(
        "mixed.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: \"1\", pods: \"110\"}}\n\
         ---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\n\
         ---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: shop}\n\
         spec: {containers: [{name: c}]}\n",
    );
    let o = flotilla(&["simulate", "--cluster", f.path(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "warning: mixed.yaml: item 2 (Deployment shop/web): skipped: kind Deployment is not loaded"
        ),
        "{}",
        stderr(&o)
    );
    let doc: Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(doc["results"][0]["node"], "n1");
}

#[test]
fn bad_input_exits_1_naming_the_problem() {
    let bad_quantity = TempFile::new(
        "bad.yaml",
        "kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: four}}\n",
    );
    let broken = TempFile::new("broken.yaml", "kind: List\nitems:\n- {kind: Pod\n");
    let small = fixture("simulate-small.yaml");
    let small = small.to_str().expect("path");
    let cases: [(&[&str], &str); 5] = [
        (
            &["simulate", "--cluster", bad_quantity.path()],
            "error: bad.yaml: item 1 (Node n1): status.allocatable.cpu: invalid quantity \"four\"",
        ),
        (
            &["explain", "default/x", "--cluster", bad_quantity.path()],
            "error: bad.yaml: item 1 (Node n1): status.allocatable.cpu: invalid quantity \"four\"",
        ),
        (
            &["simulate", "--cluster", broken.path()],
            "error: broken.yaml: invalid YAML",
        ),
        (
            &["simulate", "--cluster", "/nonexistent/cluster.yaml"],
            "error: cannot read /nonexistent/cluster.yaml",
        ),
        (
            &["explain", "default/nope", "--cluster", small],
            "error: pod default/nope is not in simulate-small",
        ),
    ];
    for (args, want) in cases {
        let o = flotilla(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).is_empty(), "{args:?}: {}", stdout(&o));
    }
}

#[test]
fn bad_command_lines_exit_2() {
    let small = fixture("simulate-small.yaml");
    let small = small.to_str().expect("path");
    let cases: [&[&str]; 4] = [
        &["simulate"],
        &["simulate", "--cluster", small, "--output", "yaml"],
        &["explain", "--cluster", small],
        &["explain", "default/web-1"],
    ];
    for args in cases {
        let o = flotilla(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn exactly_one_cluster_source_is_a_usage_rule() {
    let small = fixture("simulate-small.yaml");
    let small = small.to_str().expect("path");
    // (args, what stderr names)
    let cases: [(&[&str], &str); 5] = [
        (
            &["explain", "default/web-1"],
            "--cluster <FILE>|--kubeconfig <FILE>|--in-cluster|--kube",
        ),
        (
            &["simulate"],
            "--cluster <FILE>|--kubeconfig <FILE>|--in-cluster|--kube",
        ),
        (
            &[
                "explain",
                "default/web-1",
                "--cluster",
                small,
                "--kubeconfig",
                small,
            ],
            "cannot be used with",
        ),
        (
            &["simulate", "--kube", "--in-cluster"],
            "cannot be used with",
        ),
        // Flags of `run` that make no sense for a read.
        (
            &[
                "explain",
                "default/web-1",
                "--kube",
                "--exit-when-idle",
                "5",
            ],
            "--exit-when-idle",
        ),
    ];
    for (args, want) in cases {
        let o = flotilla(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn an_unreadable_kubeconfig_exits_1_naming_it() {
    let o = flotilla(&[
        "explain",
        "default/web-1",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "error: connecting to the Kubernetes API server: kubeconfig /nonexistent/kubeconfig"
        ),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
}

#[test]
fn help_says_what_is_read_and_that_a_live_cluster_is_only_read() {
    let o = flotilla(&["simulate", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o).replace('\n', " ");
    assert!(
        help.contains("PodDisruptionBudgets guide preemption's choice of victims; PodGroups (scheduling.x-k8s.io/v1alpha1) make gangs"),
        "{help}"
    );
    let o = flotilla(&["explain", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o).replace('\n', " ");
    assert!(help.contains("--kubeconfig"), "{help}");
    assert!(help.contains("--in-cluster"), "{help}");
    assert!(
        help.contains("A live cluster is only read (GET lists; never a watch, a binding, a status patch or an Event)"),
        "{help}"
    );
    assert!(!help.contains("pending: it comes"), "{help}");
}

#[test]
fn bench_prints_one_json_object_and_writes_the_chart() {
    let dir = std::env::temp_dir().join(format!("flotilla-bench-{}", std::process::id()));
    let chart = dir.join("sub/chart.svg");
    let out = flotilla(&[
        "bench",
        "--scenario",
        "scheduling-basic",
        "--scale",
        "0.01",
        "--workers",
        "2",
        "--output",
        "json",
        "--no-progress",
        "--chart",
        chart.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let r: Value = serde_json::from_str(&stdout(&out)).expect("one JSON object");
    assert_eq!(r["scenario"], "scheduling-basic");
    assert_eq!(r["workers"], 2);
    assert_eq!(r["pods"], 100);
    assert_eq!(r["scheduled"], 100);
    assert!(r["podsPerSecondAvg"].as_f64().expect("number") > 0.0);
    assert!(r["peakRssBytes"].as_u64().expect("bytes") > 1 << 20);
    let svg = std::fs::read_to_string(&chart).expect("chart written");
    assert!(svg.contains("<polyline"), "{}", &svg[..200.min(svg.len())]);
    assert!(
        stderr(&out).contains("chart written to"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_rejects_unknown_scenarios_and_a_sharded_baseline() {
    let out = flotilla(&["bench", "--scenario", "nope"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("one of: scheduling-basic, scheduling-basic-50k"),
        "{}",
        stderr(&out)
    );
    let out = flotilla(&[
        "bench",
        "--scenario",
        "scheduling-basic",
        "--single-scheduler",
        "--workers",
        "2",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--workers"), "{}", stderr(&out));
    let out = flotilla(&[
        "bench",
        "--scenario",
        "scheduling-basic",
        "--scale",
        "0",
        "--no-chart",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("--scale 0"), "{}", stderr(&out));
}

#[test]
fn a_malformed_pod_name_is_a_bad_command_line_before_anything_loads() {
    // The cluster file does not exist: the name is refused first (exit 2,
    // as the help says of a bad command line), not after loading (exit 1).
    for name in ["a/b/c", "/p", "ns/", ""] {
        let o = flotilla(&["explain", name, "--cluster", "/nonexistent/cluster.yaml"]);
        assert_eq!(o.status.code(), Some(2), "{name:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("is not a pod name: give NAMESPACE/NAME"),
            "{name:?}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn the_coordinator_refuses_plaintext_off_loopback_and_bad_tls_files() {
    // Plaintext on every interface, without --insecure: exit 1 before
    // anything is loaded, the message naming the fix.
    let o = flotilla(&["coordinator", "--listen", "0.0.0.0:0", "--workers", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("refusing to serve the workers' gRPC in plaintext on 0.0.0.0:0")
            && err.contains("--tls-cert, --tls-key and --tls-client-ca")
            && err.contains("--insecure"),
        "{err}"
    );
    // An unreadable certificate names its flag and file.
    let key = TempFile::new("tls.key", "not a key");
    let key = key.0.to_str().expect("utf-8 path");
    let o = flotilla(&[
        "coordinator",
        "--listen",
        "0.0.0.0:0",
        "--tls-cert",
        "/nonexistent/tls.crt",
        "--tls-key",
        key,
        "--tls-client-ca",
        "/nonexistent/ca.crt",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("error: --tls-cert /nonexistent/tls.crt: cannot read the file"),
        "{}",
        stderr(&o)
    );
    // The three TLS flags go together, and not with --insecure (usage, 2).
    for args in [
        &["coordinator", "--tls-cert", "c.pem"][..],
        &[
            "coordinator",
            "--tls-cert",
            "c",
            "--tls-key",
            "k",
            "--tls-client-ca",
            "a",
            "--insecure",
        ],
        &["worker", "--tls-cert", "c.pem", "--tls-key", "k.pem"],
    ] {
        assert_eq!(flotilla(args).status.code(), Some(2), "{args:?}");
    }
    // A worker told https:// without a CA to trust.
    let o = flotilla(&["worker", "--coordinator", "https://127.0.0.1:1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("https:// needs --tls-ca FILE"),
        "{}",
        stderr(&o)
    );
}
