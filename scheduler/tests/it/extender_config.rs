//! `extenders` and `placementWebhook` in a `KubeSchedulerConfiguration`:
//! every upstream field read, upstream's defaults and rules, errors naming
//! the field.

use std::time::Duration;

use base64::Engine as _;
use flotilla_scheduler::config::{self, ConfigError, SchedulerConfig};
use flotilla_scheduler::webhook::Fallback;
use flotilla_shared::testing::PodBuilder;

use super::{cache_with, framework_with, info, node, snapshot_of};

const HEAD: &str = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n";
const CA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/testdata/tls/ca.pem");

fn parse(body: &str) -> Result<SchedulerConfig, ConfigError> {
    config::parse(&format!("{HEAD}{body}"), "sched.yaml")
}

fn refused(body: &str) -> (String, String) {
    match parse(body) {
        Ok(cfg) => panic!("expected an error for:\n{body}\ngot {cfg:?}"),
        Err(ConfigError::Invalid { path, message, .. }) => (path, message),
        Err(other) => panic!("expected a field error for:\n{body}\ngot {other}"),
    }
}

#[test]
fn every_upstream_extender_field_is_read() {
    let ca = std::fs::read(CA).expect("test CA");
    let ca_b64 = base64::engine::general_purpose::STANDARD.encode(ca.as_slice());
    let cfg = parse(&format!(
        r#"
extenders:
- urlPrefix: https://127.0.0.1:8443/scheduler
  filterVerb: filter
  prioritizeVerb: prioritize
  preemptVerb: preempt
  bindVerb: bind
  weight: 3
  enableHTTPS: true
  tlsConfig:
    insecure: false
    serverName: extender.test
    caData: {ca_b64}
  httpTimeout: 1.5s
  nodeCacheCapable: true
  managedResources:
  - name: example.com/gpu
    ignoredByScheduler: true
  - name: example.com/fpga
  ignorable: true
- urlPrefix: http://127.0.0.1:8888
  filterVerb: filter
"#
    ))
    .expect("valid");
    assert_eq!(cfg.extenders.len(), 2);
    let e = &cfg.extenders[0];
    assert_eq!(e.url_prefix, "https://127.0.0.1:8443/scheduler");
    assert_eq!(
        (
            e.filter_verb.as_str(),
            e.prioritize_verb.as_str(),
            e.preempt_verb.as_str(),
            e.bind_verb.as_str()
        ),
        ("filter", "prioritize", "preempt", "bind")
    );
    assert_eq!(e.weight, 3);
    assert!(e.enable_https && e.node_cache_capable && e.ignorable);
    assert_eq!(e.http_timeout, Duration::from_millis(1500));
    let tls = e.tls.as_ref().expect("tls");
    assert_eq!(tls.server_name, "extender.test");
    assert_eq!(tls.ca_data, ca, "caData is base64 ([]byte in Go)");
    assert!(!e.effective_tls().expect("tls").insecure, "a CA is given");
    assert_eq!(e.managed_resources.len(), 2);
    assert!(e.managed_resources[0].ignored_by_scheduler);
    assert!(!e.managed_resources[1].ignored_by_scheduler);
    // Upstream's default timeout.
    assert_eq!(cfg.extenders[1].http_timeout, Duration::from_secs(5));
}

#[test]
fn ignored_by_scheduler_resources_become_node_resources_fit_ignored_resources() {
    let cfg = parse(
        r#"
profiles:
- schedulerName: a
  pluginConfig:
  - name: NodeResourcesFit
    args:
      ignoredResources: [example.com/other]
      scoringStrategy: {type: MostAllocated}
- schedulerName: b
extenders:
- urlPrefix: http://127.0.0.1:8888
  filterVerb: filter
  managedResources:
  - name: example.com/gpu
    ignoredByScheduler: true
"#,
    )
    .expect("valid");
    for p in &cfg.profiles {
        let args = &p.plugin_config["NodeResourcesFit"];
        assert_eq!(
            args["ignoredResources"],
            serde_json::json!(["example.com/gpu"]),
            "profile {}: the extenders' list replaces the file's, as upstream",
            p.scheduler_name
        );
    }
    assert_eq!(
        cfg.profiles[0].plugin_config["NodeResourcesFit"]["scoringStrategy"]["type"],
        "MostAllocated",
        "the rest of the args stay"
    );
    // NodeResourcesFit no longer rejects a node without the resource: the
    // extender decides.
    let fw = framework_with(&cfg.profiles[1]);
    let cache = cache_with([node("n1", "4", "8Gi").build_spec()]);
    let r = fw
        .schedule(
            &info(
                PodBuilder::new("gpu")
                    .cpu("1")
                    .request("example.com/gpu", "1"),
            ),
            &snapshot_of(&cache),
        )
        .expect("example.com/gpu is the extender's to check");
    assert_eq!(&*r.node, "n1");
}

#[test]
fn extender_mistakes_are_refused_with_the_field_path() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "extenders:\n- filterVerb: filter\n",
            "extenders[0].urlPrefix",
            "required",
        ),
        (
            "extenders:\n- urlPrefix: ftp://x\n",
            "extenders[0].urlPrefix",
            "scheme \"ftp\"",
        ),
        (
            "extenders:\n- urlPrefix: http://x\n  prioritizeVerb: prioritize\n",
            "extenders[0].weight",
            "must have a positive weight applied to it",
        ),
        (
            "extenders:\n- urlPrefix: http://x\n  prioritizeVerb: p\n  weight: -2\n",
            "extenders[0].weight",
            "must have a positive weight",
        ),
        (
            "extenders:\n- urlPrefix: http://a\n  bindVerb: bind\n- urlPrefix: http://b\n  bindVerb: bind\n",
            "extenders",
            "found 2 extenders implementing bind: only one extender can implement bind",
        ),
        (
            "extenders:\n- urlPrefix: http://a\n  managedResources:\n  - name: cpu\n",
            "extenders[0].managedResources[0].name",
            "is an invalid extended resource name",
        ),
        (
            "extenders:\n- urlPrefix: http://a\n  managedResources:\n  - name: example.com/x\n- urlPrefix: http://b\n  managedResources:\n  - name: example.com/x\n",
            "extenders[1].managedResources[0].name",
            "duplicate extender managed resource name",
        ),
        (
            "extenders:\n- urlPrefix: http://a\n  httpTimeout: -1s\n",
            "extenders[0].httpTimeout",
            "must not be negative",
        ),
        (
            "extenders:\n- urlPrefix: http://a\n  httpTimeout: 5 seconds\n",
            "extenders[0].httpTimeout",
            "time: ",
        ),
        (
            "extenders:\n- urlPrefix: https://a\n  tlsConfig:\n    caData: '***'\n",
            "extenders[0].tlsConfig.caData",
            "not base64",
        ),
        (
            "extenders:\n- urlPrefix: https://a\n  tlsConfig:\n    caFile: /nonexistent/ca.pem\n",
            "extenders[0].tlsConfig",
            "caFile \"/nonexistent/ca.pem\"",
        ),
        (
            "extenders:\n- urlPrefix: https://a\n  tlsConfig:\n    certFile: /etc/hostname\n",
            "extenders[0].tlsConfig",
            "needs its key",
        ),
        (
            "extenders:\n- urlPrefix: http://a\n  filtreVerb: filter\n",
            "extenders[0].filtreVerb",
            "unknown field",
        ),
    ];
    for (body, path, want) in cases {
        let (p, message) = refused(body);
        assert_eq!(&p, path, "{body}: {message}");
        assert!(message.contains(want), "{body}: {message} / want {want}");
    }
}

#[test]
fn a_placement_webhook_is_a_profile_field_with_defaults() {
    let cfg = parse(
        r#"
profiles:
- schedulerName: delegated
  placementWebhook:
    url: http://127.0.0.1:9090/placement
- schedulerName: batched
  placementWebhook:
    url: https://placer.example:8443/decide
    timeout: 250ms
    fallback: Pending
    nodeObjects: true
    batch: {maxPods: 64, maxWait: 5ms}
    tlsConfig: {insecure: true}
- schedulerName: plain
"#,
    )
    .expect("valid");
    let w = cfg.profiles[0].webhook.as_ref().expect("webhook");
    assert_eq!(w.url, "http://127.0.0.1:9090/placement");
    assert_eq!(w.timeout, Duration::from_secs(1));
    assert_eq!(w.fallback, Fallback::InProcess);
    assert!(!w.is_batched() && !w.node_objects);
    let b = cfg.profiles[1].webhook.as_ref().expect("webhook");
    assert_eq!(b.timeout, Duration::from_millis(250));
    assert_eq!(b.fallback, Fallback::Pending);
    assert!(b.node_objects && b.is_batched());
    assert_eq!(
        (b.batch.max_pods, b.batch.max_wait),
        (64, Duration::from_millis(5))
    );
    assert!(b.tls.as_ref().is_some_and(|t| t.insecure));
    assert!(cfg.profiles[2].webhook.is_none());
}

#[test]
fn webhook_mistakes_are_refused_with_the_field_path() {
    let at = |w: &str| format!("profiles:\n- schedulerName: x\n  placementWebhook:\n{w}");
    let cases: Vec<(String, &str, &str)> = vec![
        (
            at("    timeout: 1s\n"),
            "profiles[0].placementWebhook.url",
            "required",
        ),
        (
            at("    url: placer:9090\n"),
            "profiles[0].placementWebhook.url",
            "no scheme",
        ),
        (
            at("    url: http://p\n    fallback: Retry\n"),
            "profiles[0].placementWebhook.fallback",
            "Unsupported value: \"Retry\"",
        ),
        (
            at("    url: http://p\n    batch: {maxPods: 0}\n"),
            "profiles[0].placementWebhook.batch.maxPods",
            "must be between 1 and 1000",
        ),
        (
            at("    url: http://p\n    batch: {maxPods: 5000}\n"),
            "profiles[0].placementWebhook.batch.maxPods",
            "must be between 1 and 1000",
        ),
        (
            at("    url: http://p\n    timeout: 100ms\n    batch: {maxPods: 8, maxWait: 1s}\n"),
            "profiles[0].placementWebhook.batch.maxWait",
            "must not exceed timeout",
        ),
        (
            at("    url: http://p\n    timeout: -5s\n"),
            "profiles[0].placementWebhook.timeout",
            "must not be negative",
        ),
        (
            at("    url: http://p\n    batchSize: 4\n"),
            "profiles[0].placementWebhook.batchSize",
            "unknown field",
        ),
    ];
    for (body, path, want) in cases {
        let (p, message) = refused(&body);
        assert_eq!(p, path, "{body}: {message}");
        assert!(message.contains(want), "{body}: {message} / want {want}");
    }
}
