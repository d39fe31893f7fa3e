//! SIGTERM, what the kubelet sends a container it stops, drains and ends
//! every long-running command as Ctrl-C (SIGINT) does: `flotilla run`,
//! `flotilla coordinator` and `flotilla worker` stop taking work, let what
//! is in flight settle, report, and exit 0.

#![cfg(unix)]

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A `flotilla` process with its stderr lines forwarded to a channel.
struct Proc {
    child: Child,
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Proc {
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start flotilla");
        let err = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Proc {
            child,
            stderr: rx,
            seen: Vec::new(),
        }
    }

    /// Waits (up to `limit`) for a stderr line containing `text`.
    fn wait_for(&mut self, text: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            match self.stderr.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let hit = line.contains(text);
                    self.seen.push(line);
                    if hit {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let _ = self.child.kill();
        panic!(
            "no stderr line with {text:?} within {limit:?}; stderr:\n{}",
            self.seen.join("\n")
        );
    }

    fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
    }

    /// Waits (up to `limit`) for the process to exit; its status, stdout
    /// and the rest of stderr.
    fn exit_within(mut self, limit: Duration) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                let mut out = String::new();
                if let Some(mut o) = self.child.stdout.take() {
                    std::io::Read::read_to_string(&mut o, &mut out).expect("stdout");
                }
                self.seen.extend(self.stderr.try_iter());
                return (status, out, self.seen.join("\n"));
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                self.seen.extend(self.stderr.try_iter());
                panic!(
                    "still running {limit:?} after SIGTERM; stderr:\n{}",
                    self.seen.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

#[test]
fn sigterm_stops_a_run_with_a_partial_report() {
    let mut run = Proc::start(&[
        "run",
        "--no-progress",
        "--output",
        "json",
        "--workers",
        "2",
        "--synthetic-nodes",
        "200",
        "--synthetic-pods",
        "150000",
    ]);
    run.wait_for("coordinator listening", Duration::from_secs(180));
    std::thread::sleep(Duration::from_millis(500));
    run.sigterm();
    let (status, out, err) = run.exit_within(Duration::from_secs(180));
    assert!(status.success(), "{status}; stderr:\n{err}");
    let report: Value = serde_json::from_str(&out).expect("a JSON report on stdout");
    assert_eq!(report["stoppedBySignal"], true, "{report}");
    assert_eq!(report["checks"]["overcommittedNodes"], 0, "{report}");
    let pods = report["pods"].as_u64().expect("pods");
    let pending = report["pending"].as_u64().expect("pending");
    assert!(pending > 0 && pending < pods, "{report}");
    assert!(err.contains("stopped by a signal"), "{err}");
}

#[test]
fn sigterm_drains_a_worker_then_its_coordinator() {
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let mut coordinator = Proc::start(&[
        "coordinator",
        "--listen",
        &listen,
        "--workers",
        "1",
        "--no-progress",
        "--output",
        "json",
        "--synthetic-nodes",
        "200",
        "--synthetic-pods",
        "150000",
    ]);
    coordinator.wait_for("waiting for 1 worker", Duration::from_secs(180));
    let mut worker = Proc::start(&["worker", "--coordinator", &listen, "--name", "w-term"]);
    worker.wait_for("registered", Duration::from_secs(30));
    // Scheduling under way: pods are being bound.
    coordinator.wait_for("worker registered", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(1500));
    worker.sigterm();
    let (status, _, err) = worker.exit_within(Duration::from_secs(20));
    assert!(status.success(), "worker: {status}; stderr:\n{err}");
    assert!(
        err.contains("worker w-term:"),
        "the worker's summary: {err}"
    );

    coordinator.sigterm();
    let (status, out, err) = coordinator.exit_within(Duration::from_secs(180));
    assert!(status.success(), "coordinator: {status}; stderr:\n{err}");
    let report: Value = serde_json::from_str(&out).expect("a JSON report on stdout");
    assert_eq!(report["stoppedBySignal"], true, "{report}");
    assert_eq!(report["checks"]["overcommittedNodes"], 0, "{report}");
    assert!(
        report["scheduled"].as_u64().expect("scheduled") > 0,
        "{report}"
    );
}

#[test]
fn sigterm_stops_a_worker_still_looking_for_its_coordinator() {
    let port = free_port().to_string();
    let addr = format!("127.0.0.1:{port}");
    let worker = Proc::start(&["worker", "--coordinator", &addr, "--connect-timeout", "600"]);
    // Its signal handler is installed at start; give it that long.
    std::thread::sleep(Duration::from_secs(1));
    worker.sigterm();
    let (status, _, err) = worker.exit_within(Duration::from_secs(10));
    assert!(status.success(), "{status}; stderr:\n{err}");
}
