//! OpenTelemetry spans of a run, captured by an in-memory exporter: one
//! trace per scheduling attempt spanning the coordinator (dispatch,
//! arbitration, the Binding), the worker (its cycle and extension points,
//! its binding cycle) and the gRPC hop between them; a retried pod's next
//! attempt is a new trace linked to the previous one.
//!
//! A test binary of its own: the subscriber is process-wide.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};

use flotilla_loadtest::run::{RunConfig, run_embedded_with_cluster};
use flotilla_loadtest::workload::Workload;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

fn attr(s: &SpanData, key: &str) -> Option<String> {
    s.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

fn by_id(spans: &[SpanData]) -> HashMap<SpanId, &SpanData> {
    spans
        .iter()
        .map(|s| (s.span_context.span_id(), s))
        .collect()
}

/// The spans named `name` whose `pod` attribute is `pod`.
fn named<'a>(spans: &'a [SpanData], name: &str, pod: &str) -> Vec<&'a SpanData> {
    spans
        .iter()
        .filter(|s| s.name == name && attr(s, "pod").as_deref() == Some(pod))
        .collect()
}

fn parent<'a>(ids: &HashMap<SpanId, &'a SpanData>, s: &SpanData) -> Option<&'a SpanData> {
    ids.get(&s.parent_span_id).copied()
}

#[test]
fn one_trace_per_attempt_from_dispatch_to_binding() {
    let exporter = InMemorySpanExporter::default();
    let _guard = flotilla_shared::trace::init_with_exporter(exporter.clone(), "flotilla-test");
    assert!(flotilla_shared::trace::enabled());

    // Two low pods fill the two nodes (two feasible nodes, so the cycle
    // scores: upstream skips Score when only one node is feasible); after
    // the barrier a high pod must preempt one of them: its first attempt
    // fails, its next one (after the victim goes) binds.
    let pods = vec![
        PodBuilder::new("low-1").cpu("2").priority(1).build(),
        PodBuilder::new("low-2").cpu("2").priority(1).build(),
        PodBuilder::new("high").cpu("2").priority(100).build(),
    ];
    let workload = Workload {
        name: "tracing".into(),
        nodes: ["n1", "n2"]
            .iter()
            .map(|n| NodeBuilder::new(n).cpu("2").memory("8Gi").pods(110).build())
            .collect(),
        pods,
        barriers: vec![2],
        ..Default::default()
    };
    let cfg = RunConfig {
        in_process_workers: 1,
        expect_workers: 1,
        progress: false,
        timeout: Duration::from_secs(60),
        settle: Duration::from_millis(300),
        grace_period: Some(0),
        ..RunConfig::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (report, _) = rt
        .block_on(run_embedded_with_cluster(workload, cfg))
        .expect("the run completes");
    assert_eq!(report.scheduled, 2, "{}", report.to_text());
    assert_eq!(report.preempted, 1, "{}", report.to_text());
    drop(rt);

    let spans = exporter.get_finished_spans().expect("spans");
    let ids = by_id(&spans);

    // low-1's one attempt: a single trace from the dispatch to the Binding.
    let dispatch = named(&spans, "dispatch", "default/low-1");
    assert_eq!(dispatch.len(), 1, "dispatched once");
    let trace: TraceId = dispatch[0].span_context.trace_id();
    let cycle = named(&spans, "scheduling_cycle", "default/low-1");
    assert_eq!(cycle.len(), 1);
    assert_eq!(
        cycle[0].span_context.trace_id(),
        trace,
        "the worker continues the trace"
    );
    assert_eq!(
        parent(&ids, cycle[0]).map(|p| p.name.as_ref()),
        Some("dispatch")
    );
    let node = attr(cycle[0], "node");
    assert!(matches!(node.as_deref(), Some("n1" | "n2")), "{node:?}");
    assert_eq!(attr(cycle[0], "result").as_deref(), Some("placed"));
    assert_eq!(attr(cycle[0], "worker").as_deref(), Some("online-0"));
    for point in ["PreFilter", "Filter", "PreScore", "Score"] {
        let s = spans
            .iter()
            .find(|s| s.name == point && s.parent_span_id == cycle[0].span_context.span_id())
            .unwrap_or_else(|| panic!("{point} under the cycle"));
        assert_eq!(s.span_context.trace_id(), trace);
    }
    let arbitration = named(&spans, "bind_arbitration", "default/low-1");
    assert_eq!(arbitration.len(), 1);
    let a = arbitration[0];
    assert_eq!(a.span_context.trace_id(), trace, "across the gRPC hop");
    assert!(
        a.parent_span_is_remote,
        "its parent came in traceparent metadata"
    );
    assert_eq!(
        parent(&ids, a).map(|p| p.name.as_ref()),
        Some("binding_cycle")
    );
    assert_eq!(attr(a, "outcome").as_deref(), Some("bound"));
    let binding = named(&spans, "binding", "default/low-1");
    assert_eq!(binding.len(), 1);
    assert_eq!(binding[0].parent_span_id, a.span_context.span_id());

    // high: two attempts, two traces, the second linked to the first.
    let mut attempts = named(&spans, "scheduling_cycle", "default/high");
    attempts.sort_by_key(|s| s.start_time);
    assert!(attempts.len() >= 2, "{attempts:?}");
    let (first, last) = (attempts[0], attempts[attempts.len() - 1]);
    assert_eq!(attr(first, "result").as_deref(), Some("unschedulable"));
    assert_eq!(attr(last, "result").as_deref(), Some("placed"));
    assert_ne!(
        first.span_context.trace_id(),
        last.span_context.trace_id(),
        "a new trace per attempt"
    );
    let linked: Vec<TraceId> = last
        .links
        .iter()
        .map(|l| l.span_context.trace_id())
        .collect();
    let before = attempts[attempts.len() - 2].span_context.trace_id();
    assert_eq!(linked, [before], "linked to the previous attempt");
    assert!(
        !named(&spans, "preemption_arbitration", "default/high").is_empty(),
        "the preemption proposal is traced too"
    );
}
