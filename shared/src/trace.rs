//! Tracing: logs on stderr (`RUST_LOG`, default `warn`) and, when the
//! standard OpenTelemetry variables ask for it, spans exported over OTLP
//! (gRPC) with W3C trace context carried between processes.
//!
//! # Configuration (the OpenTelemetry SDK's own variables)
//! | variable | effect |
//! | --- | --- |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | export spans there (gRPC, e.g. `http://otel-collector:4317`); unset: no spans are recorded at all, and the tracing calls cost a disabled-callsite check |
//! | `OTEL_TRACES_EXPORTER` | `otlp` (default when an endpoint is set) or `none` |
//! | `OTEL_SDK_DISABLED` | `true`: off |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the resource (default service name: `flotilla-<command>`) |
//! | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | sampling (default `parentbased_always_on`) |
//! | `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_BSP_*` | as the SDK documents |
//! | `FLOTILLA_TRACE_LEVEL` | Flotilla's: which spans and events are exported, an `EnvFilter` (default `info,flotilla_scheduler::framework=debug`: the cycle's spans, and one event per plugin at PreFilter, PreScore and Score) |
//!
//! # One pod's attempt, one trace
//! The coordinator opens `dispatch` when it hands a pod to a worker and
//! sends its context with the pod ([`inject`], in the watch event); the
//! worker's `scheduling_cycle` continues that trace ([`set_parent`]), with
//! child spans per extension point; the bind proposal carries the context
//! in gRPC metadata (`traceparent`, [`metadata_pairs`]); the coordinator's
//! `bind_arbitration` and `binding` spans continue it. A retried pod's next
//! cycle starts a new trace linked to the previous attempt ([`link`]).

use std::collections::HashMap;
use std::sync::OnceLock;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// A W3C trace context carried between processes: `traceparent` (and
/// `tracestate` when set). Empty when there is nothing to carry.
pub type Carrier = HashMap<String, String>;

/// Flushes and stops the span exporter when dropped (at exit).
#[derive(Debug, Default)]
pub struct Guard {
    provider: Option<SdkTracerProvider>,
}

impl Guard {
    /// Whether spans are being exported.
    #[must_use]
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            let _ = p.shutdown();
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the environment asks for spans to be exported (see the module
/// docs).
#[must_use]
pub fn otlp_requested() -> bool {
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return false;
    }
    match env("OTEL_TRACES_EXPORTER") {
        Some(v) if v.eq_ignore_ascii_case("none") => false,
        Some(v) if v.eq_ignore_ascii_case("otlp") => true,
        _ => {
            env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
                || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
        }
    }
}

fn span_filter() -> tracing_subscriber::EnvFilter {
    let level = env("FLOTILLA_TRACE_LEVEL")
        .unwrap_or_else(|| "info,flotilla_scheduler::framework=debug".into());
    tracing_subscriber::EnvFilter::try_new(&level).unwrap_or_else(|e| {
        eprintln!(
            "warning: FLOTILLA_TRACE_LEVEL={level:?} is not a valid filter ({e}); using \"info\""
        );
        tracing_subscriber::EnvFilter::new("info")
    })
}

fn log_layer<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use std::io::IsTerminal as _;
    tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
}

fn provider_with(
    exporter: impl SpanExporter + 'static,
    service: &str,
    batch: bool,
) -> SdkTracerProvider {
    let mut resource = opentelemetry_sdk::Resource::builder();
    if env("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(service.to_owned());
    }
    let builder = SdkTracerProvider::builder().with_resource(resource.build());
    let builder = if batch {
        builder.with_batch_exporter(exporter)
    } else {
        builder.with_simple_exporter(exporter)
    };
    builder.build()
}

/// Installs the process's subscriber: logs on stderr, plus span export when
/// [`otlp_requested`]. Call once, inside the Tokio runtime (the OTLP
/// exporter's channel lives there). `service` is the default service name.
/// An exporter that cannot be built is reported on stderr and left out:
/// tracing never stops the scheduler.
#[must_use]
pub fn init(service: &str) -> Guard {
    let registry = tracing_subscriber::registry().with(log_layer());
    if !otlp_requested() {
        let _ = registry.try_init();
        return Guard::default();
    }
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("warning: OpenTelemetry export disabled: {e}");
            let _ = registry.try_init();
            return Guard::default();
        }
    };
    let provider = provider_with(exporter, service, true);
    install(registry, &provider);
    Guard {
        provider: Some(provider),
    }
}

/// Installs a subscriber exporting every span to `exporter` as it ends (for
/// tests: an in-memory exporter). Call once per process.
#[must_use]
pub fn init_with_exporter(exporter: impl SpanExporter + 'static, service: &str) -> Guard {
    let provider = provider_with(exporter, service, false);
    install(tracing_subscriber::registry().with(log_layer()), &provider);
    Guard {
        provider: Some(provider),
    }
}

fn install<S>(registry: S, provider: &SdkTracerProvider)
where
    S: tracing::Subscriber
        + for<'a> tracing_subscriber::registry::LookupSpan<'a>
        + Send
        + Sync
        + 'static,
{
    let tracer = provider.tracer("flotilla");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(span_filter());
    let _ = registry.with(layer).try_init();
    let _ = ENABLED.set(true);
}

static ENABLED: OnceLock<bool> = OnceLock::new();

/// Whether spans are exported in this process (so contexts are worth
/// carrying).
#[must_use]
pub fn enabled() -> bool {
    ENABLED.get().copied().unwrap_or(false)
}

/// The W3C context of `span`, to send along (empty when tracing is off or
/// the span is disabled).
#[must_use]
pub fn inject(span: &tracing::Span) -> Carrier {
    let mut carrier = Carrier::new();
    if !enabled() {
        return carrier;
    }
    let cx = span.context();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    }
    carrier
}

fn extract(carrier: &Carrier) -> Option<opentelemetry::Context> {
    if carrier.is_empty() || !enabled() {
        return None;
    }
    let cx = TraceContextPropagator::new().extract(carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// Makes `span` (just created, not entered yet) a child of the context in
/// `carrier`; nothing when the carrier is empty or tracing is off.
pub fn set_parent(span: &tracing::Span, carrier: &Carrier) {
    if let Some(cx) = extract(carrier) {
        let _ = span.set_parent(cx);
    }
}

/// Links `span` to the span of `carrier` (a retried pod's new attempt to its
/// previous one).
pub fn link(span: &tracing::Span, carrier: &Carrier) {
    if let Some(cx) = extract(carrier) {
        span.add_link(cx.span().span_context().clone());
    }
}

/// The context of `span` as gRPC metadata pairs (`traceparent`, ...).
#[must_use]
pub fn metadata_pairs(span: &tracing::Span) -> Vec<(String, String)> {
    inject(span).into_iter().collect()
}

/// The trace id of `span` (hex; empty when tracing is off), for logs.
#[must_use]
pub fn trace_id(span: &tracing::Span) -> String {
    if !enabled() {
        return String::new();
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    if sc.is_valid() {
        sc.trace_id().to_string()
    } else {
        String::new()
    }
}
