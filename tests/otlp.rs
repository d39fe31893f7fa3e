//! `flotilla run` exporting its spans over OTLP/gRPC to a collector, as an
//! operator would wire it: only the standard `OTEL_*` variables, no flag.
//! The collector here is the OTLP trace service, served on loopback.

use std::process::Command;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use tonic::{Request, Response, Status};

#[derive(Clone, Default)]
struct Collector {
    /// (service.name, span) of every span received.
    spans: Arc<Mutex<Vec<(String, Span)>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        req: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let mut spans = self.spans.lock().expect("lock");
        for rs in req.into_inner().resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                .map(|v| match v {
                    Value::StringValue(s) => s.clone(),
                    other => format!("{other:?}"),
                })
                .unwrap_or_default();
            for ss in rs.scope_spans {
                spans.extend(ss.spans.into_iter().map(|s| (service.clone(), s)));
            }
        }
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

fn attr(s: &Span, key: &str) -> Option<String> {
    s.attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(v) => Some(v.clone()),
            other => Some(format!("{other:?}")),
        }
    })
}

fn run_flotilla(endpoint: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args([
            "run",
            "--synthetic-nodes",
            "4",
            "--synthetic-pods",
            "12",
            "--workers",
            "2",
            "--output",
            "json",
        ])
        .env("RUST_LOG", "warn")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "2000")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_TRACES_EXPORTER")
        .env_remove("OTEL_SDK_DISABLED")
        .output()
        .expect("run flotilla")
}

#[test]
fn run_exports_one_trace_per_pod_attempt_to_an_otlp_collector() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let collector = Collector::default();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = TraceServiceServer::new(collector.clone());
    rt.spawn(
        tonic::transport::Server::builder()
            .add_service(server)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );

    let out = run_flotilla(&format!("http://{addr}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["scheduled"], 12, "{report}");

    let spans = collector.spans.lock().expect("lock").clone();
    assert!(
        spans.iter().all(|(service, _)| service == "flotilla-run"),
        "the default service name"
    );
    let named = |name: &str| -> Vec<&Span> {
        spans
            .iter()
            .map(|(_, s)| s)
            .filter(|s| s.name == name)
            .collect()
    };
    let cycles = named("scheduling_cycle");
    let dispatches = named("dispatch");
    let bindings = named("binding");
    assert_eq!(cycles.len(), 12, "one cycle per pod, none retried");
    assert_eq!(dispatches.len(), 12);
    assert_eq!(bindings.len(), 12);
    for cycle in &cycles {
        let pod = attr(cycle, "pod").expect("pod attribute");
        let dispatch = dispatches
            .iter()
            .find(|d| attr(d, "pod").as_deref() == Some(pod.as_str()))
            .unwrap_or_else(|| panic!("{pod} dispatched"));
        assert_eq!(cycle.trace_id, dispatch.trace_id, "{pod}: one trace");
        assert_eq!(cycle.parent_span_id, dispatch.span_id, "{pod}");
        let binding = bindings
            .iter()
            .find(|b| attr(b, "pod").as_deref() == Some(pod.as_str()))
            .unwrap_or_else(|| panic!("{pod} bound"));
        assert_eq!(
            binding.trace_id, cycle.trace_id,
            "{pod}: across the gRPC hop"
        );
        assert_eq!(attr(cycle, "result").as_deref(), Some("placed"), "{pod}");
    }
}

#[test]
fn an_unreachable_collector_does_not_stop_the_run() {
    // Port 9 (discard) on loopback: nothing listens, every export fails.
    let out = run_flotilla("http://127.0.0.1:9");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["scheduled"], 12, "{report}");
}
