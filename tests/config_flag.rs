//! `--config FILE` on the binary: a bad configuration stops `flotilla run`,
//! `flotilla coordinator` and `flotilla worker` before anything starts
//! (exit 1, the file and field path on stderr); a good one takes effect.

use std::path::PathBuf;
use std::process::{Command, Output};

const HEAD: &str = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";

/// A scratch directory for this test process.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flotilla-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn flotilla(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("the binary runs")
}

#[test]
fn a_bad_config_makes_every_command_exit_1_with_the_path_on_stderr() {
    let dir = scratch("bad");
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        format!(
            "{HEAD}profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeAffinity\n      - name: Foo\n"
        ),
    )
    .expect("write");
    let bad = bad.to_str().expect("utf-8 path");
    for args in [
        vec!["run", "--config", bad, "--no-progress"],
        vec!["coordinator", "--config", bad, "--listen", "127.0.0.1:0"],
        vec!["worker", "--config", bad, "--connect-timeout", "1"],
    ] {
        let out = flotilla(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "error: {bad}: profiles[0].plugins.score.enabled[1].name: unknown plugin \"Foo\""
            )),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: nothing ran");
    }

    let missing = dir.join("missing.yaml");
    let out = flotilla(&[
        "run",
        "--config",
        missing.to_str().expect("utf-8"),
        "--no-progress",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot read the scheduler configuration"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_profile_workload_class_sends_its_pods_to_that_pool() {
    let dir = scratch("good");
    let good = dir.join("batch.yaml");
    std::fs::write(
        &good,
        format!("{HEAD}parallelism: 2\nprofiles:\n- schedulerName: default-scheduler\n  workloadClass: batch\n"),
    )
    .expect("write");
    let out = flotilla(&[
        "run",
        "--config",
        good.to_str().expect("utf-8"),
        "--synthetic-nodes",
        "5",
        "--synthetic-pods",
        "20",
        "--workers",
        "2",
        "--no-progress",
        "--output",
        "json",
        "--timeout",
        "60",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    assert_eq!(report["scheduled"], 20, "{report}");
    let per_worker = report["podsPerWorker"].as_array().expect("podsPerWorker");
    let bound = |class: &str| -> u64 {
        per_worker
            .iter()
            .filter(|w| w["class"] == class)
            .map(|w| w["pods"].as_u64().unwrap_or(0))
            .sum()
    };
    // Synthetic pods classify as online; the profile overrides that.
    assert_eq!((bound("batch"), bound("online")), (20, 0), "{report}");
    std::fs::remove_dir_all(&dir).ok();
}

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("loadtest/tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn bad_plugin_args_name_the_path_inside_plugin_config() {
    let dir = scratch("args");
    let bad = dir.join("args.yaml");
    std::fs::write(
        &bad,
        format!(
            "{HEAD}profiles:\n- pluginConfig:\n  - name: InterPodAffinity\n    args:\n      hardPodAffinityWeight: 5\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: Fastest\n"
        ),
    )
    .expect("write");
    let bad = bad.to_str().expect("utf-8");
    let cluster = fixture("simulate-small.yaml");
    let out = flotilla(&["simulate", "--cluster", &cluster, "--config", bad]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: {bad}: profiles[0].pluginConfig[1].args.scoringStrategy.type: Unsupported value: \"Fastest\""
        )),
        "{stderr}"
    );
}

/// Running one plugin alone through standard configuration: `multiPoint`
/// disabled `"*"`, NodeResourcesFit at `filter` only, PrioritySort and
/// DefaultBinder kept. simulate then reports exactly that plugin's Filter
/// result and no score at all.
#[test]
fn one_plugin_alone_through_config_is_all_simulate_reports() {
    let dir = scratch("alone");
    let cfg = dir.join("alone.yaml");
    std::fs::write(
        &cfg,
        format!(
            "{HEAD}profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - name: PrioritySort\n      - name: DefaultBinder\n      disabled:\n      - name: \"*\"\n    filter:\n      enabled:\n      - name: NodeResourcesFit\n"
        ),
    )
    .expect("write");
    let cluster = fixture("simulate-small.yaml");
    let out = flotilla(&[
        "simulate",
        "--cluster",
        &cluster,
        "--config",
        cfg.to_str().expect("utf-8"),
        "--output",
        "json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let results = doc["results"].as_array().expect("results");
    assert!(!results.is_empty());
    for r in results {
        for (node, v) in r["nodes"].as_object().expect("nodes") {
            let filter = &v["filter"];
            match filter["code"].as_str() {
                Some("Success") => {
                    assert_eq!(
                        v["scores"],
                        serde_json::json!({}),
                        "{node}: no Score plugin"
                    );
                    assert_eq!(v["totalScore"], 0, "{node}");
                }
                _ => assert_eq!(filter["plugin"], "NodeResourcesFit", "{node}: {v}"),
            }
        }
    }
    // The tainted node-3 is no obstacle without TaintToleration.
    let web1 = &results[0];
    assert_eq!(web1["nodes"]["node-3"]["filter"]["code"], "Success");
}
