//! Validation of what an operator applies: the plain manifests in
//! `deploy/manifests/` and the Helm chart in `deploy/helm/flotilla/`.
//!
//! - every document decodes into its typed k8s-openapi struct and encodes
//!   back to the same value (a misspelled or misplaced field is lost in the
//!   round trip, so it shows up as a difference);
//! - RBAC grants exactly the table [`RBAC`], no more, no less;
//! - the ConfigMap holds a `KubeSchedulerConfiguration` with two profiles;
//! - container args use only flags `flotilla <subcommand> --help` lists;
//! - the objects are wired together (Service ↔ pods, Lease ↔ Role, config
//!   path ↔ volume ↔ ConfigMap key, worker class ↔ profile, TLS flags ↔
//!   mounted Secret) and hardened;
//! - the NetworkPolicy admits only worker pods to the coordinator's gRPC
//!   port (its metrics port stays open);
//! - the chart rendered with its default values gives exactly the objects of
//!   `deploy/manifests/` plus the TLS Secrets it generates (which the
//!   manifests leave to the operator), and follows its values when they
//!   change (cert-manager Certificates, TLS off, no NetworkPolicy).
//!
//! What the API server itself says about the manifests is checked by
//! `deploy/check.sh` (server-side dry run), which needs a cluster.

#[path = "deploy_manifests/helm.rs"]
mod helm;
#[path = "deploy_manifests/objects.rs"]
mod objects;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value as Json, json};

use flotilla_shared::WorkloadClass;
use objects::{Doc, ObjectKey, by_key, diff, load_dir, round_trip, str_at};

/// Namespace every namespaced object lives in.
const NAMESPACE: &str = "flotilla-system";
/// Image of every container (placeholder registry).
const IMAGE: &str = "ghcr.io/flotilla/flotilla:0.1.0";
/// The coordinator's ServiceAccount (the only identity with API access).
const COORDINATOR_SA: &str = "flotilla-coordinator";
/// The workers' ServiceAccount (no API access).
const WORKER_SA: &str = "flotilla-worker";
/// Scope of a grant made by a ClusterRoleBinding.
const CLUSTER: &str = "(cluster)";

/// (ServiceAccount, scope, API group, resource, resourceNames, verbs).
type RbacRow = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
);

/// What each ServiceAccount may do: (ServiceAccount, scope, API group,
/// resource, resourceNames, verbs). Scope is [`CLUSTER`] or a namespace.
/// `deploy/README.md` ("RBAC") says why each row is needed. A new API call
/// needs a row here and a rule in `deploy/manifests/20-rbac.yaml` and the
/// chart; rows for the workers' ServiceAccount are deliberately absent.
// One row per line, so the table reads as the README's table does.
#[rustfmt::skip]
const RBAC: &[RbacRow] = &[
    (COORDINATOR_SA, CLUSTER, "", "nodes", &[], &["get", "list", "watch"]),
    (COORDINATOR_SA, CLUSTER, "", "pods", &[], &["get", "list", "watch", "delete"]),
    (COORDINATOR_SA, CLUSTER, "", "pods/binding", &[], &["create"]),
    (COORDINATOR_SA, CLUSTER, "", "pods/status", &[], &["patch", "update"]),
    (COORDINATOR_SA, CLUSTER, "", "namespaces", &[], &["get", "list", "watch"]),
    (COORDINATOR_SA, CLUSTER, "scheduling.k8s.io", "priorityclasses", &[], &["list", "watch"]),
    (COORDINATOR_SA, CLUSTER, "policy", "poddisruptionbudgets", &[], &["list", "watch"]),
    (COORDINATOR_SA, CLUSTER, "", "persistentvolumeclaims", &[], &["list", "watch"]),
    (COORDINATOR_SA, CLUSTER, "", "persistentvolumes", &[], &["list", "watch"]),
    (COORDINATOR_SA, CLUSTER, "", "persistentvolumes", &[], &["get", "update"]),
    (COORDINATOR_SA, CLUSTER, "", "persistentvolumeclaims", &[], &["patch"]),
    (COORDINATOR_SA, CLUSTER, "storage.k8s.io", "storageclasses", &[], &["list", "watch"]),
    (COORDINATOR_SA, CLUSTER, "storage.k8s.io", "csinodes", &[], &["list", "watch"]),
    (COORDINATOR_SA, CLUSTER, "storage.k8s.io", "csidrivers", &[], &["list", "watch"]),
    (COORDINATOR_SA, CLUSTER, "storage.k8s.io", "volumeattachments", &[], &["list", "watch"]),
    (COORDINATOR_SA, CLUSTER, "events.k8s.io", "events", &[], &["create", "patch", "update"]),
    (COORDINATOR_SA, CLUSTER, "", "events", &[], &["create", "patch"]),
    (COORDINATOR_SA, CLUSTER, "scheduling.x-k8s.io", "podgroups", &[], &["get", "list", "watch"]),
    (COORDINATOR_SA, CLUSTER, "scheduling.x-k8s.io", "podgroups/status", &[], &["patch"]),
    (COORDINATOR_SA, CLUSTER, "scheduling.k8s.io", "podgroups", &[], &["get", "list", "watch"]),
    (COORDINATOR_SA, CLUSTER, "scheduling.k8s.io", "podgroups/status", &[], &["patch"]),
    (COORDINATOR_SA, NAMESPACE, "coordination.k8s.io", "leases", &[], &["create"]),
    (COORDINATOR_SA, NAMESPACE, "coordination.k8s.io", "leases", &["flotilla-coordinator"], &["get", "update", "patch"]),
];

/// Flags the manifests use before the binary has them (the coordinator's
/// leader election lands with the Kubernetes backend). Accepted here while
/// `--help` does not list them; the test notes when one appears so it can
/// be dropped from this list.
const PENDING_FLAGS: &[(&str, &str)] = &[];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn manifests() -> Vec<Doc> {
    load_dir(&deploy_dir().join("manifests")).unwrap_or_else(|e| panic!("{e}"))
}

/// Decodes a document into `T`; the round-trip test reports decoding errors
/// with detail, here they only stop the test.
fn decode<T: k8s_openapi::serde::de::DeserializeOwned>(doc: &Doc) -> T {
    serde_json::from_value(doc.value.clone())
        .unwrap_or_else(|e| panic!("{} ({}): {e}", doc.origin, doc.key()))
}

fn of_kind<'a>(docs: &'a [Doc], kind: &'a str) -> impl Iterator<Item = &'a Doc> + 'a {
    docs.iter().filter(move |d| d.key().kind == kind)
}

fn find<'a>(docs: &'a [Doc], kind: &str, namespace: &str, name: &str) -> &'a Doc {
    docs.iter()
        .find(|d| {
            let k = d.key();
            k.kind == kind && k.namespace == namespace && k.name == name
        })
        .unwrap_or_else(|| panic!("no {kind} {namespace}/{name} in the manifests"))
}

fn pod_spec(d: &Deployment) -> &PodSpec {
    d.spec
        .template
        .spec
        .as_ref()
        .expect("Deployment without spec.template.spec")
}

fn name_of(d: &Deployment) -> &str {
    d.metadata.name.as_deref().unwrap_or("")
}

/// The value after `flag` in `args` (`--flag value` or `--flag=value`).
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let prefix = format!("{flag}=");
    args.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            args.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix(&prefix)
        }
    })
}

fn args_of(c: &Container) -> &[String] {
    c.args.as_deref().unwrap_or(&[])
}

/// The `--long-flags` a help text mentions.
fn flags_in(help: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for (i, _) in help.match_indices("--") {
        let rest = &help[i + 2..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(rest.len());
        let name = &rest[..len];
        if name.starts_with(|c: char| c.is_ascii_alphabetic()) {
            flags.insert(format!("--{name}"));
        }
    }
    flags
}

fn help_of(subcommand: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args([subcommand, "--help"])
        .output()
        .expect("cannot run the flotilla binary");
    assert!(
        out.status.success(),
        "`flotilla {subcommand} --help` failed (is {subcommand:?} a subcommand?): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// ---------------------------------------------------------------------------
// Typed round trip and inventory

#[test]
fn every_manifest_decodes_into_its_typed_struct_without_losing_fields() {
    let docs = manifests();
    assert!(!docs.is_empty(), "deploy/manifests/ holds no documents");
    let mut problems = Vec::new();
    for doc in &docs {
        match round_trip(doc) {
            Err(e) => problems.push(e),
            Ok(back) => {
                for d in diff(&doc.value, &back) {
                    problems.push(format!("{} ({}): {d}", doc.origin, doc.key()));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "fields lost or changed in the k8s-openapi round trip (left: the YAML, right: \
         decoded and encoded again; a field only on the left is unknown to its type):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_round_trip_catches_a_misspelled_field() {
    // The check above is only as good as this: an unknown field must show.
    let yaml = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  \
                replica: 2\n  selector: {}\n  template: {}\n";
    let doc = &objects::split_docs("typo.yaml", yaml).unwrap()[0];
    let back = round_trip(doc).unwrap();
    assert_eq!(
        diff(&doc.value, &back),
        vec![".spec.replica: left 2, right -".to_owned()]
    );
}

#[test]
fn manifests_hold_each_object_once_in_flotilla_system() {
    let docs = manifests();
    let map = by_key(&docs).unwrap_or_else(|e| panic!("{e}"));
    let got: BTreeSet<(String, String, String)> = map
        .keys()
        .map(|k| (k.kind.clone(), k.namespace.clone(), k.name.clone()))
        .collect();
    let ns = NAMESPACE.to_owned();
    let want: BTreeSet<(String, String, String)> = [
        ("Namespace", "", NAMESPACE),
        ("ServiceAccount", NAMESPACE, COORDINATOR_SA),
        ("ServiceAccount", NAMESPACE, WORKER_SA),
        ("ClusterRole", "", "flotilla-coordinator"),
        ("ClusterRoleBinding", "", "flotilla-coordinator"),
        ("Role", NAMESPACE, "flotilla-coordinator-leader-election"),
        (
            "RoleBinding",
            NAMESPACE,
            "flotilla-coordinator-leader-election",
        ),
        ("ConfigMap", NAMESPACE, "flotilla-config"),
        ("Service", NAMESPACE, "flotilla-coordinator"),
        ("Deployment", NAMESPACE, "flotilla-coordinator"),
        ("Deployment", NAMESPACE, "flotilla-worker-online"),
        ("Deployment", NAMESPACE, "flotilla-worker-batch"),
        ("NetworkPolicy", NAMESPACE, "flotilla-coordinator"),
    ]
    .into_iter()
    .map(|(k, n, m)| (k.to_owned(), n.to_owned(), m.to_owned()))
    .collect();
    assert_eq!(got, want);
    // The Namespace comes first, so `kubectl apply -f deploy/manifests/`
    // creates it before anything in it.
    assert_eq!(docs[0].key().kind, "Namespace", "first document");
    assert!(got.iter().all(|(_, n, _)| n.is_empty() || *n == ns));
}

// ---------------------------------------------------------------------------
// RBAC

/// One granted (ServiceAccount, scope, group, resource, resourceNames, verb).
type Grant = (String, String, String, String, String, String);

fn expected_grants() -> BTreeSet<Grant> {
    let mut set = BTreeSet::new();
    for (sa, scope, group, resource, names, verbs) in RBAC {
        for verb in *verbs {
            set.insert((
                sa.to_string(),
                scope.to_string(),
                group.to_string(),
                resource.to_string(),
                names.join(","),
                verb.to_string(),
            ));
        }
    }
    set
}

/// Every grant the bindings in `docs` make, expanded to single verbs.
fn granted(docs: &[Doc]) -> Result<BTreeSet<Grant>, String> {
    let mut set = BTreeSet::new();
    for binding in docs
        .iter()
        .filter(|d| matches!(d.key().kind.as_str(), "ClusterRoleBinding" | "RoleBinding"))
    {
        let key = binding.key();
        let scope = if key.kind == "ClusterRoleBinding" {
            CLUSTER.to_owned()
        } else {
            key.namespace.clone()
        };
        let role_kind = str_at(&binding.value, "/roleRef/kind");
        let role_name = str_at(&binding.value, "/roleRef/name");
        let role_ns = if role_kind == "Role" {
            key.namespace.as_str()
        } else {
            ""
        };
        let role = docs
            .iter()
            .find(|d| {
                let k = d.key();
                k.kind == role_kind && k.name == role_name && k.namespace == role_ns
            })
            .ok_or_else(|| {
                format!("{key}: roleRef {role_kind} {role_name} is not in the manifests")
            })?;
        if role.value.get("aggregationRule").is_some() {
            return Err(format!("{}: aggregated roles are not allowed", role.key()));
        }
        let rules: Vec<PolicyRule> = serde_json::from_value(
            role.value
                .get("rules")
                .cloned()
                .unwrap_or(Json::Array(vec![])),
        )
        .map_err(|e| format!("{}: rules: {e}", role.key()))?;
        let subjects = binding
            .value
            .get("subjects")
            .and_then(Json::as_array)
            .cloned();
        for s in subjects.unwrap_or_default() {
            if str_at(&s, "/kind") != "ServiceAccount" {
                return Err(format!("{key}: only ServiceAccounts may be bound, not {s}"));
            }
            if str_at(&s, "/namespace") != NAMESPACE {
                return Err(format!("{key}: subject {s} is outside {NAMESPACE}"));
            }
            let sa = str_at(&s, "/name").to_owned();
            for (i, r) in rules.iter().enumerate() {
                if r.non_resource_urls.is_some() {
                    return Err(format!("{}: rules[{i}]: nonResourceURLs", role.key()));
                }
                let mut names = r.resource_names.clone().unwrap_or_default();
                names.sort();
                let all = [
                    r.api_groups.as_deref().unwrap_or(&[]),
                    r.resources.as_deref().unwrap_or(&[]),
                    &r.verbs,
                    &names,
                ];
                if all.iter().any(|l| l.iter().any(|x| x.contains('*'))) {
                    return Err(format!("{}: rules[{i}]: wildcard", role.key()));
                }
                for group in r.api_groups.as_deref().unwrap_or(&[]) {
                    for resource in r.resources.as_deref().unwrap_or(&[]) {
                        for verb in &r.verbs {
                            set.insert((
                                sa.clone(),
                                scope.clone(),
                                group.clone(),
                                resource.clone(),
                                names.join(","),
                                verb.clone(),
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(set)
}

#[test]
fn rbac_grants_exactly_the_table() {
    let got = granted(&manifests()).unwrap_or_else(|e| panic!("{e}"));
    let want = expected_grants();
    let extra: Vec<_> = got.difference(&want).collect();
    let missing: Vec<_> = want.difference(&got).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "RBAC differs from the table RBAC in this file.\n\
         granted but not in the table: {extra:#?}\nin the table but not granted: {missing:#?}"
    );
}

#[test]
fn rbac_check_rejects_wildcards_and_foreign_subjects() {
    // The RBAC check must not pass a manifest that grants more than it lists.
    let yaml = |rule: &str, subject: &str| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: r}}\n\
             rules: [{rule}]\n---\napiVersion: rbac.authorization.k8s.io/v1\n\
             kind: ClusterRoleBinding\nmetadata: {{name: b}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: r}}\n\
             subjects: [{subject}]\n"
        )
    };
    let sa = "{kind: ServiceAccount, name: flotilla-coordinator, namespace: flotilla-system}";
    let cases = [
        (
            yaml("{apiGroups: [''], resources: ['*'], verbs: [get]}", sa),
            "wildcard",
        ),
        (
            yaml("{apiGroups: [''], resources: [pods], verbs: ['*']}", sa),
            "wildcard",
        ),
        (
            yaml("{nonResourceURLs: [/metrics], verbs: [get]}", sa),
            "nonResourceURLs",
        ),
        (
            yaml(
                "{apiGroups: [''], resources: [pods], verbs: [get]}",
                "{kind: Group, name: system:authenticated}",
            ),
            "only ServiceAccounts",
        ),
    ];
    for (text, want) in cases {
        let docs = objects::split_docs("case.yaml", &text).unwrap();
        let err = granted(&docs).expect_err(&text);
        assert!(err.contains(want), "{err:?} should mention {want:?}");
    }
    // And a plain grant is expanded one verb per row.
    let docs = objects::split_docs(
        "ok.yaml",
        &yaml(
            "{apiGroups: [''], resources: [pods], verbs: [get, list]}",
            sa,
        ),
    )
    .unwrap();
    assert_eq!(granted(&docs).unwrap().len(), 2);
}

#[test]
fn service_accounts_match_their_rights() {
    let docs = manifests();
    let worker: k8s_openapi::api::core::v1::ServiceAccount =
        decode(find(&docs, "ServiceAccount", NAMESPACE, WORKER_SA));
    assert_eq!(
        worker.automount_service_account_token,
        Some(false),
        "the workers' ServiceAccount must not mount a token"
    );
    for d in of_kind(&docs, "Deployment") {
        let dep: Deployment = decode(d);
        let spec = pod_spec(&dep);
        let sa = spec.service_account_name.as_deref().unwrap_or("default");
        find(&docs, "ServiceAccount", NAMESPACE, sa);
        if sa == WORKER_SA {
            assert_eq!(
                spec.automount_service_account_token,
                Some(false),
                "{}: workers mount no token",
                name_of(&dep)
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Scheduler configuration

/// The `KubeSchedulerConfiguration` in the ConfigMap `flotilla-config`.
fn scheduler_config(docs: &[Doc]) -> Json {
    let cm: ConfigMap = decode(find(docs, "ConfigMap", NAMESPACE, "flotilla-config"));
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("config.yaml"))
        .expect("ConfigMap flotilla-config has no data.config.yaml");
    serde_saphyr::from_str(text)
        .unwrap_or_else(|e| panic!("flotilla-config data.config.yaml is not YAML: {e}"))
}

#[test]
fn config_map_loads_through_the_scheduler_config_loader() {
    let cm: ConfigMap = decode(find(
        &manifests(),
        "ConfigMap",
        NAMESPACE,
        "flotilla-config",
    ));
    let text = &cm.data.as_ref().expect("data")["config.yaml"];
    let cfg = flotilla_scheduler::config::parse(text, "flotilla-config/config.yaml")
        .unwrap_or_else(|e| panic!("{e}"));
    let classes: BTreeMap<String, Option<WorkloadClass>> = cfg
        .profiles
        .iter()
        .map(|p| (p.scheduler_name.clone(), p.workload_class))
        .collect();
    assert_eq!(
        classes,
        BTreeMap::from([
            ("flotilla-batch".to_owned(), Some(WorkloadClass::Batch)),
            ("flotilla-online".to_owned(), Some(WorkloadClass::Online)),
        ])
    );
}

#[test]
fn config_map_holds_two_profiles_with_distinct_scheduler_names() {
    let config = scheduler_config(&manifests());
    assert_eq!(
        str_at(&config, "/apiVersion"),
        "kubescheduler.config.k8s.io/v1"
    );
    assert_eq!(str_at(&config, "/kind"), "KubeSchedulerConfiguration");
    let profiles = config
        .get("profiles")
        .and_then(Json::as_array)
        .expect("config has no profiles list");
    let got: BTreeMap<&str, &str> = profiles
        .iter()
        .map(|p| (str_at(p, "/schedulerName"), str_at(p, "/workloadClass")))
        .collect();
    assert_eq!(got.len(), profiles.len(), "schedulerNames must be distinct");
    assert_eq!(
        got,
        BTreeMap::from([("flotilla-batch", "batch"), ("flotilla-online", "online")])
    );
    for (name, class) in got {
        assert!(
            WorkloadClass::parse(class).is_some(),
            "profile {name}: workloadClass {class:?} is not online|batch"
        );
    }
}

// ---------------------------------------------------------------------------
// Containers

#[test]
fn container_args_use_only_flags_the_binary_accepts() {
    let docs = manifests();
    let mut problems = Vec::new();
    let mut helps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for d in of_kind(&docs, "Deployment") {
        let dep: Deployment = decode(d);
        for c in &pod_spec(&dep).containers {
            let args = args_of(c);
            let Some(sub) = args.first() else {
                problems.push(format!(
                    "{}/{}: no args (subcommand)",
                    name_of(&dep),
                    c.name
                ));
                continue;
            };
            let known = helps
                .entry(sub.clone())
                .or_insert_with(|| flags_in(&help_of(sub)));
            for a in args.iter().filter(|a| a.starts_with("--")) {
                let flag = a.split('=').next().unwrap_or(a);
                let pending = PENDING_FLAGS.contains(&(sub.as_str(), flag));
                if known.contains(flag) {
                    if pending {
                        eprintln!(
                            "note: {flag} of `flotilla {sub}` now exists: drop it from PENDING_FLAGS"
                        );
                    }
                } else if !pending {
                    problems.push(format!(
                        "{}/{}: `flotilla {sub}` has no flag {flag}",
                        name_of(&dep),
                        c.name
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(helps.contains_key("coordinator") && helps.contains_key("worker"));
}

#[test]
fn help_flags_are_read_from_the_help_text() {
    let flags =
        flags_in("  -l, --listen <LISTEN>  gRPC\n      --on-bad-input <X>\n  -- not a flag\n");
    assert_eq!(
        flags,
        BTreeSet::from(["--listen".to_owned(), "--on-bad-input".to_owned()])
    );
    // And the real binary's worker help lists the flags it has today.
    let worker = flags_in(&help_of("worker"));
    for f in ["--coordinator", "--class", "--name", "--help"] {
        assert!(worker.contains(f), "worker --help lacks {f}: {worker:?}");
    }
}

#[test]
fn containers_are_hardened_and_sized() {
    let docs = manifests();
    let mut problems = Vec::new();
    for d in of_kind(&docs, "Deployment") {
        let dep: Deployment = decode(d);
        let name = name_of(&dep).to_owned();
        let spec = pod_spec(&dep);
        let mut bad = |what: &str| problems.push(format!("{name}: {what}"));
        if spec
            .scheduler_name
            .as_deref()
            .is_some_and(|s| s != "default-scheduler")
        {
            bad("Flotilla's own pods must be placed by the default scheduler");
        }
        if spec.host_network == Some(true) || spec.host_pid == Some(true) {
            bad("host namespaces");
        }
        let psc = spec.security_context.clone().unwrap_or_default();
        if psc.run_as_non_root != Some(true) {
            bad("securityContext.runAsNonRoot is not true");
        }
        if psc.run_as_user.is_some_and(|u| u == 0) {
            bad("securityContext.runAsUser is 0");
        }
        if psc.seccomp_profile.map(|s| s.type_) != Some("RuntimeDefault".to_owned()) {
            bad("securityContext.seccompProfile.type is not RuntimeDefault");
        }
        for c in &spec.containers {
            let mut bad = |what: &str| problems.push(format!("{name}/{}: {what}", c.name));
            if c.image.as_deref() != Some(IMAGE) {
                bad(&format!("image {:?}, want {IMAGE}", c.image));
            }
            let sc = c.security_context.clone().unwrap_or_default();
            if sc.allow_privilege_escalation != Some(false) {
                bad("allowPrivilegeEscalation is not false");
            }
            if sc.privileged == Some(true) {
                bad("privileged");
            }
            if sc.read_only_root_filesystem != Some(true) {
                bad("readOnlyRootFilesystem is not true");
            }
            let caps = sc.capabilities.unwrap_or_default();
            if caps.drop != Some(vec!["ALL".to_owned()]) || caps.add.is_some() {
                bad("capabilities must drop [ALL] and add none");
            }
            let res = c.resources.clone().unwrap_or_default();
            for (what, list) in [("requests", &res.requests), ("limits", &res.limits)] {
                for r in ["cpu", "memory"] {
                    if !list.as_ref().is_some_and(|m| m.contains_key(r)) {
                        bad(&format!("resources.{what}.{r} is not set"));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------
// Wiring between objects

#[test]
fn objects_are_wired_together() {
    let docs = manifests();
    let service: Service = decode(find(&docs, "Service", NAMESPACE, "flotilla-coordinator"));
    let svc_spec = service.spec.as_ref().expect("Service without spec");
    let svc_port = &svc_spec.ports.as_ref().expect("Service without ports")[0];
    let coordinator: Deployment =
        decode(find(&docs, "Deployment", NAMESPACE, "flotilla-coordinator"));
    let config = scheduler_config(&docs);
    let profile_classes: BTreeSet<&str> = config["profiles"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| str_at(p, "/workloadClass"))
        .collect();

    for d in of_kind(&docs, "Deployment") {
        let dep: Deployment = decode(d);
        let name = name_of(&dep);
        let spec = &dep.spec;
        let pod_labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone());
        let pod_labels = pod_labels.unwrap_or_default();
        for (k, v) in spec.selector.match_labels.iter().flatten() {
            assert_eq!(
                pod_labels.get(k),
                Some(v),
                "{name}: selector {k}={v} not on its pods"
            );
        }
        let pod = pod_spec(&dep);
        for c in &pod.containers {
            let args = args_of(c);
            // Every $(VAR) in args is an env var of the container.
            let env: BTreeSet<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
            for a in args {
                if let Some(var) = a.strip_prefix("$(").and_then(|r| r.strip_suffix(')')) {
                    assert!(
                        env.contains(var),
                        "{name}: args use $({var}) but env lacks it"
                    );
                }
            }
            // --config names a key of a ConfigMap mounted at its directory.
            let config_path = Path::new(
                flag_value(args, "--config").unwrap_or_else(|| panic!("{name}: no --config")),
            );
            let dir = config_path.parent().unwrap().to_str().unwrap();
            let file = config_path.file_name().unwrap().to_str().unwrap();
            let mount = c
                .volume_mounts
                .iter()
                .flatten()
                .find(|m| m.mount_path == dir)
                .unwrap_or_else(|| panic!("{name}: nothing mounted at {dir}"));
            let volume = pod
                .volumes
                .iter()
                .flatten()
                .find(|v| v.name == mount.name)
                .unwrap_or_else(|| panic!("{name}: no volume {}", mount.name));
            let cm_name = &volume
                .config_map
                .as_ref()
                .expect("config volume is a ConfigMap")
                .name;
            let cm: ConfigMap = decode(find(&docs, "ConfigMap", NAMESPACE, cm_name));
            assert!(
                cm.data.as_ref().is_some_and(|d| d.contains_key(file)),
                "{name}: --config {} but ConfigMap {cm_name} has no key {file}",
                config_path.display()
            );

            // Mutual TLS: every TLS flag names a key of the Secret mounted
            // at its directory, and nothing runs in plaintext.
            let tls_flags: &[&str] = match args.first().map(String::as_str) {
                Some("coordinator") => &["--tls-cert", "--tls-key", "--tls-client-ca"],
                _ => &["--tls-ca", "--tls-cert", "--tls-key"],
            };
            assert!(
                !args.iter().any(|a| a == "--insecure"),
                "{name}: --insecure"
            );
            for flag in tls_flags {
                let path = Path::new(
                    flag_value(args, flag).unwrap_or_else(|| panic!("{name}: no {flag}")),
                );
                let secret = secret_at(pod, c, path.parent().unwrap().to_str().unwrap())
                    .unwrap_or_else(|| {
                        panic!("{name}: {flag} {}: no Secret mounted there", path.display())
                    });
                let want = match args.first().map(String::as_str) {
                    Some("coordinator") => "flotilla-coordinator-tls".to_owned(),
                    _ => format!(
                        "flotilla-worker-{}-tls",
                        flag_value(args, "--class").unwrap_or("")
                    ),
                };
                assert_eq!(secret.0, want, "{name}: {flag}");
                let key = path.file_name().unwrap().to_str().unwrap();
                assert!(
                    ["tls.crt", "tls.key", "ca.crt"].contains(&key)
                        && secret.1.is_none_or(|items| items.contains(&key.to_owned())),
                    "{name}: {flag} reads {key}, not a key of Secret {}",
                    secret.0
                );
            }
            match args.first().map(String::as_str) {
                Some("coordinator") => {
                    assert_eq!(spec.replicas, Some(2), "{name}: two replicas");
                    assert!(
                        args.iter().any(|a| a == "--leader-elect"),
                        "{name}: --leader-elect"
                    );
                    // The Lease it elects with is the one the Role names.
                    let lease = flag_value(args, "--lease-name").expect("--lease-name");
                    let role = find(
                        &docs,
                        "Role",
                        NAMESPACE,
                        "flotilla-coordinator-leader-election",
                    );
                    let rules: Vec<PolicyRule> =
                        serde_json::from_value(role.value["rules"].clone()).unwrap();
                    assert!(
                        rules
                            .iter()
                            .any(|r| r.resource_names.as_deref() == Some(&[lease.to_owned()])),
                        "{name}: --lease-name {lease} is not the Role's resourceName"
                    );
                    // ... in the pod's own namespace, from the downward API.
                    assert_eq!(
                        flag_value(args, "--lease-namespace"),
                        Some("$(POD_NAMESPACE)")
                    );
                    let ns_env = c.env.iter().flatten().find(|e| e.name == "POD_NAMESPACE");
                    let field = ns_env
                        .and_then(|e| e.value_from.as_ref())
                        .and_then(|v| v.field_ref.as_ref())
                        .map(|f| f.field_path.as_str());
                    assert_eq!(field, Some("metadata.namespace"), "{name}: POD_NAMESPACE");
                    // The Service reaches the listener.
                    let port = c
                        .ports
                        .iter()
                        .flatten()
                        .find(|p| {
                            svc_port.target_port
                                == Some(IntOrString::String(p.name.clone().unwrap_or_default()))
                        })
                        .unwrap_or_else(|| {
                            panic!("{name}: no container port named by the Service's targetPort")
                        });
                    assert_eq!(
                        flag_value(args, "--listen"),
                        Some(format!("0.0.0.0:{}", port.container_port).as_str())
                    );
                    for (k, v) in svc_spec.selector.iter().flatten() {
                        assert_eq!(pod_labels.get(k), Some(v), "Service selector {k}={v}");
                    }
                    // The two replicas prefer different nodes.
                    let anti = pod
                        .affinity
                        .as_ref()
                        .and_then(|a| a.pod_anti_affinity.as_ref())
                        .and_then(|a| {
                            a.preferred_during_scheduling_ignored_during_execution
                                .as_ref()
                        })
                        .expect("coordinator without pod anti-affinity");
                    assert!(anti.iter().any(|t| {
                        t.pod_affinity_term.topology_key == "kubernetes.io/hostname"
                            && t.pod_affinity_term
                                .label_selector
                                .as_ref()
                                .and_then(|s| s.match_labels.as_ref())
                                .is_some_and(|m| {
                                    m.iter().all(|(k, v)| pod_labels.get(k) == Some(v))
                                })
                    }));
                }
                Some("worker") => {
                    let want = format!(
                        "https://{}:{}",
                        service.metadata.name.as_deref().unwrap_or(""),
                        svc_port.port
                    );
                    assert_eq!(
                        flag_value(args, "--coordinator"),
                        Some(want.as_str()),
                        "{name}"
                    );
                    let class = flag_value(args, "--class").expect("--class");
                    assert!(
                        WorkloadClass::parse(class).is_some(),
                        "{name}: --class {class}"
                    );
                    assert!(
                        profile_classes.contains(class),
                        "{name}: no profile has workloadClass {class}"
                    );
                    assert_eq!(name, format!("flotilla-worker-{class}"));
                }
                other => panic!("{name}: unexpected subcommand {other:?}"),
            }
        }
    }
    // Both classes have workers, and the coordinator is a Deployment of its own.
    let worker_classes: BTreeSet<String> = of_kind(&docs, "Deployment")
        .map(decode::<Deployment>)
        .filter_map(|d| {
            let c = &pod_spec(&d).containers[0];
            flag_value(args_of(c), "--class").map(str::to_owned)
        })
        .collect();
    assert_eq!(
        worker_classes,
        BTreeSet::from(["batch".to_owned(), "online".to_owned()])
    );
    assert_eq!(name_of(&coordinator), "flotilla-coordinator");
}

/// The Secret mounted at `dir` in container `c` of `pod`: its name, and the
/// keys it projects when it lists `items` (`None`: every key).
fn secret_at(pod: &PodSpec, c: &Container, dir: &str) -> Option<(String, Option<Vec<String>>)> {
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == dir)?;
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)?;
    let secret = volume.secret.as_ref()?;
    let items = secret
        .items
        .as_ref()
        .map(|items| items.iter().map(|i| i.path.clone()).collect());
    Some((secret.secret_name.clone()?, items))
}

/// The Secrets the Deployments of `docs` mount.
fn mounted_secrets(docs: &[Doc]) -> BTreeSet<String> {
    of_kind(docs, "Deployment")
        .map(decode::<Deployment>)
        .flat_map(|d| {
            pod_spec(&d)
                .volumes
                .iter()
                .flatten()
                .filter_map(|v| v.secret.as_ref().and_then(|s| s.secret_name.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn network_policy_admits_only_workers_to_the_grpc_port() {
    let docs = manifests();
    check_network_policy(&docs);
}

/// The NetworkPolicy of `docs` selects the coordinator's pods and admits
/// to their gRPC port only the worker pods of both pools; the metrics port
/// stays open; nothing else is admitted.
fn check_network_policy(docs: &[Doc]) {
    let np: NetworkPolicy = decode(find(
        docs,
        "NetworkPolicy",
        NAMESPACE,
        "flotilla-coordinator",
    ));
    let spec = np.spec.as_ref().expect("NetworkPolicy without spec");
    let labels_of = |name: &str| {
        let d: Deployment = decode(find(docs, "Deployment", NAMESPACE, name));
        d.spec
            .template
            .metadata
            .and_then(|m| m.labels)
            .unwrap_or_default()
    };
    let selects = |sel: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
                   labels: &BTreeMap<String, String>| {
        sel.match_expressions.is_none()
            && sel
                .match_labels
                .iter()
                .flatten()
                .all(|(k, v)| labels.get(k) == Some(v))
    };
    let coordinator = labels_of("flotilla-coordinator");
    let pod_selector = spec.pod_selector.clone().unwrap_or_default();
    assert!(
        pod_selector.match_labels.iter().flatten().next().is_some(),
        "an empty podSelector"
    );
    assert!(
        selects(&pod_selector, &coordinator),
        "podSelector misses the coordinator"
    );
    for worker in ["flotilla-worker-online", "flotilla-worker-batch"] {
        assert!(
            !selects(&pod_selector, &labels_of(worker)),
            "podSelector also selects {worker}"
        );
    }
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Ingress".to_owned()][..])
    );
    let rules = spec.ingress.as_deref().unwrap_or_default();
    let port_names = |r: &k8s_openapi::api::networking::v1::NetworkPolicyIngressRule| {
        r.ports
            .iter()
            .flatten()
            .map(|p| match &p.port {
                Some(IntOrString::String(s)) => s.clone(),
                other => panic!("NetworkPolicy ports by name, got {other:?}"),
            })
            .collect::<Vec<_>>()
    };
    let mut grpc_from = Vec::new();
    let mut open = Vec::new();
    for r in rules {
        let ports = port_names(r);
        assert!(!ports.is_empty(), "a rule without ports admits every port");
        match &r.from {
            None => open.extend(ports),
            Some(peers) => {
                for p in peers {
                    assert!(
                        p.namespace_selector.is_none() && p.ip_block.is_none(),
                        "peers other than pods of this namespace: {p:?}"
                    );
                    let sel = p.pod_selector.as_ref().expect("a podSelector");
                    for worker in ["flotilla-worker-online", "flotilla-worker-batch"] {
                        assert!(selects(sel, &labels_of(worker)), "{worker} not admitted");
                    }
                    assert!(
                        !selects(sel, &BTreeMap::new()),
                        "an empty podSelector admits every pod"
                    );
                    grpc_from.extend(ports.iter().cloned());
                }
            }
        }
    }
    assert_eq!(
        grpc_from,
        ["grpc"],
        "workers reach the gRPC port, and only it"
    );
    assert_eq!(open, ["metrics"], "only the metrics port is open to all");
}

// ---------------------------------------------------------------------------
// Helm chart

fn chart_dir() -> PathBuf {
    deploy_dir().join("helm").join("flotilla")
}

/// The chart's objects rendered with `overrides`.
fn render(overrides: &Json) -> Vec<Doc> {
    let rendered = helm::render_chart(
        &chart_dir(),
        overrides,
        &helm::Release {
            name: "flotilla",
            namespace: "default",
        },
    )
    .unwrap_or_else(|e| panic!("the chart does not render: {e}"));
    let mut docs = Vec::new();
    for r in rendered.iter().filter(|r| r.file.ends_with(".yaml")) {
        docs.extend(
            objects::split_docs(&format!("templates/{}", r.file), &r.text)
                .unwrap_or_else(|e| panic!("{e}\n--- rendered:\n{}", r.text)),
        );
    }
    docs
}

/// The value with ConfigMap data keys ending in `.yaml` parsed, so two
/// renderings of the same configuration compare equal whatever their layout.
fn normalized(doc: &Doc) -> Json {
    let mut v = doc.value.clone();
    if doc.key().kind == "ConfigMap"
        && let Some(Json::Object(data)) = v.get_mut("data")
    {
        for (k, text) in data.iter_mut() {
            if let (true, Some(s)) = (k.ends_with(".yaml"), text.as_str()) {
                *text = serde_saphyr::from_str(s)
                    .unwrap_or_else(|e| panic!("{}: data.{k} is not YAML: {e}", doc.origin));
            }
        }
    }
    v
}

#[test]
fn helm_chart_renders_the_manifests_with_default_values() {
    let rendered = render(&Json::Null);
    // The TLS Secrets the chart generates are the operator's to create with
    // the plain manifests: exactly those they mount, and the CA.
    let generated: BTreeSet<String> = of_kind(&rendered, "Secret").map(|d| d.key().name).collect();
    let mut want = mounted_secrets(&manifests());
    want.insert("flotilla-ca".to_owned());
    assert_eq!(generated, want, "the Secrets the chart generates");
    let rendered: Vec<Doc> = rendered
        .into_iter()
        .filter(|d| d.key().kind != "Secret")
        .collect();
    let chart = by_key(&rendered).unwrap_or_else(|e| panic!("{e}"));
    let plain = by_key(&manifests()).unwrap_or_else(|e| panic!("{e}"));
    let only = |a: &BTreeMap<ObjectKey, Doc>, b: &BTreeMap<ObjectKey, Doc>| -> Vec<String> {
        a.keys()
            .filter(|k| !b.contains_key(k))
            .map(ToString::to_string)
            .collect()
    };
    assert!(
        only(&chart, &plain).is_empty() && only(&plain, &chart).is_empty(),
        "objects only in the chart: {:?}\nobjects only in deploy/manifests: {:?}",
        only(&chart, &plain),
        only(&plain, &chart)
    );
    let mut problems = Vec::new();
    for (key, c) in &chart {
        let p = &plain[key];
        for d in diff(&normalized(p), &normalized(c)) {
            problems.push(format!("{key} ({} vs {}): {d}", p.origin, c.origin));
        }
        if let Err(e) = round_trip(c) {
            problems.push(e);
        }
    }
    assert!(
        problems.is_empty(),
        "the chart's default rendering differs from deploy/manifests/ (left: manifests, \
         right: chart):\n{}",
        problems.join("\n")
    );
}

#[test]
fn helm_chart_follows_its_values() {
    let docs = render(&json!({
        "image": {"repository": "registry.example/flotilla", "tag": "0.2.0"},
        "namespace": "sched",
        "createNamespace": false,
        "logLevel": "debug",
        "coordinator": {"replicas": 3, "port": 7443, "leaseName": "flotilla-lease"},
        "workers": [{
            "class": "batch",
            "replicas": 5,
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
        }],
        "profiles": [{"schedulerName": "fleet-batch", "workloadClass": "batch"}],
    }));
    for d in &docs {
        round_trip(d).unwrap_or_else(|e| panic!("{e}"));
    }
    let keys: BTreeSet<String> = docs.iter().map(|d| d.key().to_string()).collect();
    assert!(
        !docs.iter().any(|d| d.key().kind == "Namespace"),
        "createNamespace: false"
    );
    assert!(
        docs.iter()
            .all(|d| ["", "sched"].contains(&d.key().namespace.as_str())),
        "{keys:#?}"
    );
    let crb = docs
        .iter()
        .find(|d| d.key().kind == "ClusterRoleBinding")
        .unwrap();
    assert_eq!(str_at(&crb.value, "/subjects/0/namespace"), "sched");
    let role = docs.iter().find(|d| d.key().kind == "Role").unwrap();
    assert_eq!(
        role.value["rules"][1]["resourceNames"],
        json!(["flotilla-lease"])
    );
    let svc = docs.iter().find(|d| d.key().kind == "Service").unwrap();
    assert_eq!(svc.value["spec"]["ports"][0]["port"], json!(7443));

    let deployments: BTreeMap<String, Deployment> = of_kind(&docs, "Deployment")
        .map(|d| (d.key().name, decode::<Deployment>(d)))
        .collect();
    assert_eq!(
        deployments.keys().cloned().collect::<Vec<_>>(),
        ["flotilla-coordinator", "flotilla-worker-batch"]
    );
    let coord = &deployments["flotilla-coordinator"];
    assert_eq!(coord.spec.replicas, Some(3));
    let c = &pod_spec(coord).containers[0];
    assert_eq!(
        flag_value(args_of(c), "--lease-name"),
        Some("flotilla-lease")
    );
    assert_eq!(flag_value(args_of(c), "--listen"), Some("0.0.0.0:7443"));
    assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 7443);
    let worker = &deployments["flotilla-worker-batch"];
    assert_eq!(worker.spec.replicas, Some(5));
    let w = &pod_spec(worker).containers[0];
    assert_eq!(
        flag_value(args_of(w), "--coordinator"),
        Some("https://flotilla-coordinator:7443")
    );
    let limits = w.resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["memory"].0, "2Gi");
    for d in deployments.values() {
        let c = &pod_spec(d).containers[0];
        assert_eq!(c.image.as_deref(), Some("registry.example/flotilla:0.2.0"));
        let log = c
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "RUST_LOG")
            .unwrap();
        assert_eq!(log.value.as_deref(), Some("debug"));
    }
    let config = scheduler_config(&docs_with_namespace(&docs, "sched"));
    assert_eq!(
        config["profiles"],
        json!([{"schedulerName": "fleet-batch", "workloadClass": "batch"}])
    );
}

/// `docs` with every namespaced object moved to [`NAMESPACE`], so helpers
/// that look objects up there work on a rendering into another namespace.
fn docs_with_namespace(docs: &[Doc], from: &str) -> Vec<Doc> {
    docs.iter()
        .cloned()
        .map(|mut d| {
            if d.key().namespace == from {
                d.value["metadata"]["namespace"] = json!(NAMESPACE);
            }
            d
        })
        .collect()
}

#[test]
fn helm_notes_render() {
    let rendered = helm::render_chart(
        &chart_dir(),
        &Json::Null,
        &helm::Release {
            name: "flotilla",
            namespace: "default",
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let notes = rendered
        .iter()
        .find(|r| r.file == "NOTES.txt")
        .expect("templates/NOTES.txt");
    assert!(
        notes.text.contains("spec.schedulerName: flotilla-online"),
        "{}",
        notes.text
    );
    assert!(
        notes.text.contains("spec.schedulerName: flotilla-batch"),
        "{}",
        notes.text
    );
    assert!(
        notes.text.contains(
            "Workers reach the coordinator over mutual TLS: Secrets flotilla-coordinator-tls\n\
             and flotilla-worker-<class>-tls, generated by the chart (CA in flotilla-ca)."
        ),
        "{}",
        notes.text
    );
}

// ---------------------------------------------------------------------------
// The renderer itself: Helm's behaviour for the functions the chart may use.

/// Renders a throwaway chart holding `template` (and `helpers` as
/// `_helpers.tpl`) with `values`.
fn render_snippet(template: &str, helpers: &str, values: &Json) -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!(
        "flotilla-helm-snippet-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("templates")).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: t\nversion: 0.0.1\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("values.yaml"),
        serde_json::to_string(values).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("templates/_helpers.tpl"), helpers).unwrap();
    std::fs::write(dir.join("templates/t.yaml"), template).unwrap();
    let out = helm::render_chart(
        &dir,
        &Json::Null,
        &helm::Release {
            name: "r",
            namespace: "ns",
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
    out.map(|mut r| r.remove(0).text)
}

#[test]
fn renderer_follows_helm_for_include_to_yaml_and_nindent() {
    let helpers = r#"{{- define "lbl" -}}
a: {{ .Values.a }}
b: x
{{- end }}"#;
    let values = json!({"a": "1", "res": {"limits": {"cpu": "2", "memory": "1Gi"}}, "n": 3});
    let cases = [
        // include + nindent: a newline, then every line indented.
        (
            "x:\n  {{- include \"lbl\" . | nindent 2 }}",
            "x:\n  a: 1\n  b: x",
        ),
        // toYaml drops its final newline; nested maps keep their shape.
        (
            "r:\n  {{- toYaml .Values.res | nindent 2 }}",
            "r:\n  limits:\n    cpu: \"2\"\n    memory: 1Gi",
        ),
        // Numbers print as integers; $ is the root inside range.
        (
            "{{ range .Values.res }}{{ $.Values.n }}{{ end }} {{ .Release.Namespace }}",
            "3 ns",
        ),
        (
            "{{- if .Values.missingFlag }}yes{{ else }}no{{ end }}",
            "no",
        ),
    ];
    for (template, want) in cases {
        let got = render_snippet(template, helpers, &values).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, want, "template {template:?}");
    }
    // What Helm would print as "" is an error here; functions Helm has but
    // the chart may not use do not parse.
    let err = render_snippet("v: {{ .Values.nope }}", helpers, &values).unwrap_err();
    assert!(err.contains("<no value>"), "{err}");
    let err = render_snippet("v: {{ .Values.a | quote }}", helpers, &values).unwrap_err();
    assert!(err.contains("quote"), "{err}");
}

#[test]
fn values_merge_like_helm() {
    let mut base = json!({"a": {"b": 1, "c": [1, 2]}, "d": "x"});
    helm::merge_values(&mut base, &json!({"a": {"c": [3]}, "e": true}));
    assert_eq!(base, json!({"a": {"b": 1, "c": [3]}, "d": "x", "e": true}));
}

/// The text of key `key` of Secret `name` in `docs` (base64-decoded).
fn secret_text(docs: &[Doc], ns: &str, name: &str, key: &str) -> String {
    let secret: Secret = decode(find(docs, "Secret", ns, name));
    let data = secret.data.unwrap_or_default();
    let bytes = &data
        .get(key)
        .unwrap_or_else(|| panic!("Secret {name} has no {key}"))
        .0;
    String::from_utf8(bytes.clone()).expect("utf-8")
}

#[test]
fn helm_chart_generates_the_tls_certificates() {
    // The renderer's genCA / genSignedCert record what each certificate
    // was asked for (tests/deploy_manifests/helm.rs).
    let docs = render(&json!({"namespace": "sched", "createNamespace": false}));
    let ca = secret_text(&docs, "sched", "flotilla-ca", "tls.crt");
    assert_eq!(ca, "fake CA cn=flotilla-ca days=3650");
    let coordinator = secret_text(&docs, "sched", "flotilla-coordinator-tls", "tls.crt");
    assert_eq!(
        coordinator,
        format!(
            "fake certificate cn=flotilla-coordinator.sched.svc ips=[] \
             dns=[flotilla-coordinator,flotilla-coordinator.sched,flotilla-coordinator.sched.svc,\
             flotilla-coordinator.sched.svc.cluster.local] days=3650 ca=({ca})"
        )
    );
    for class in ["online", "batch"] {
        let name = format!("flotilla-worker-{class}-tls");
        assert_eq!(
            secret_text(&docs, "sched", &name, "tls.crt"),
            format!(
                "fake certificate cn=flotilla-worker-{class} ips=[] \
                 dns=[{class}.worker.flotilla.internal] days=3650 ca=({ca})"
            )
        );
        assert_eq!(secret_text(&docs, "sched", &name, "ca.crt"), ca);
        assert_eq!(
            secret_text(&docs, "sched", &name, "tls.key"),
            format!("fake key cn=flotilla-worker-{class}")
        );
    }
    assert_eq!(
        secret_text(&docs, "sched", "flotilla-coordinator-tls", "ca.crt"),
        ca
    );
    // Without generation (the operator's Secrets), none; the pods still
    // mount them.
    let docs = render(&json!({"tls": {"generate": false}}));
    assert_eq!(of_kind(&docs, "Secret").count(), 0);
    assert_eq!(mounted_secrets(&docs).len(), 3);
}

#[test]
fn helm_chart_issues_the_certificates_with_cert_manager() {
    let docs = render(&json!({"tls": {"certManager": {"enabled": true}}}));
    assert_eq!(
        of_kind(&docs, "Secret").count(),
        0,
        "cert-manager writes the Secrets"
    );
    let certs: BTreeMap<String, &Doc> = of_kind(&docs, "Certificate")
        .map(|d| (d.key().name, d))
        .collect();
    assert_eq!(
        certs.keys().cloned().collect::<Vec<_>>(),
        [
            "flotilla-ca",
            "flotilla-coordinator",
            "flotilla-worker-batch",
            "flotilla-worker-online"
        ]
    );
    let secret_names: BTreeSet<String> = certs
        .values()
        .map(|d| str_at(&d.value, "/spec/secretName").to_owned())
        .collect();
    let mut want = mounted_secrets(&docs);
    want.insert("flotilla-ca".to_owned());
    assert_eq!(
        secret_names, want,
        "Certificates write the Secrets the pods mount"
    );
    let c = &certs["flotilla-coordinator"].value;
    assert_eq!(
        c["spec"]["usages"],
        json!(["server auth", "digital signature"])
    );
    assert_eq!(
        c["spec"]["dnsNames"][2],
        json!(format!("flotilla-coordinator.{NAMESPACE}.svc"))
    );
    assert_eq!(
        c["spec"]["issuerRef"],
        json!({"name": "flotilla-ca", "kind": "Issuer"})
    );
    let w = &certs["flotilla-worker-online"].value;
    assert_eq!(
        w["spec"]["dnsNames"],
        json!(["online.worker.flotilla.internal"])
    );
    assert_eq!(
        w["spec"]["usages"],
        json!(["client auth", "digital signature"])
    );
    let issuers: BTreeSet<String> = of_kind(&docs, "Issuer").map(|d| d.key().name).collect();
    assert_eq!(
        issuers,
        BTreeSet::from(["flotilla-ca".to_owned(), "flotilla-selfsigned".to_owned()])
    );
    assert_eq!(certs["flotilla-ca"].value["spec"]["isCA"], json!(true));

    // The operator's issuer: no CA of the chart's own.
    let docs = render(&json!({"tls": {"certManager": {
        "enabled": true,
        "issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"},
    }}}));
    assert_eq!(of_kind(&docs, "Issuer").count(), 0);
    let names: Vec<String> = of_kind(&docs, "Certificate")
        .map(|d| d.key().name)
        .collect();
    assert!(!names.contains(&"flotilla-ca".to_owned()), "{names:?}");
    for d in of_kind(&docs, "Certificate") {
        assert_eq!(
            d.value["spec"]["issuerRef"],
            json!({"name": "corp-ca", "kind": "ClusterIssuer"})
        );
    }
}

#[test]
fn helm_chart_without_tls_or_network_policy() {
    let docs = render(&json!({"tls": {"enabled": false}, "networkPolicy": {"enabled": false}}));
    assert_eq!(of_kind(&docs, "NetworkPolicy").count(), 0);
    assert_eq!(of_kind(&docs, "Secret").count(), 0);
    assert!(mounted_secrets(&docs).is_empty());
    for d in of_kind(&docs, "Deployment") {
        let dep: Deployment = decode(d);
        let args = args_of(&pod_spec(&dep).containers[0]);
        assert!(!args.iter().any(|a| a.starts_with("--tls")), "{args:?}");
        match args[0].as_str() {
            // Plaintext off loopback needs --insecure, or it refuses to start.
            "coordinator" => assert!(args.iter().any(|a| a == "--insecure")),
            _ => assert_eq!(
                flag_value(args, "--coordinator"),
                Some("flotilla-coordinator:7070")
            ),
        }
    }
    // With defaults the policy is there, as in deploy/manifests/.
    check_network_policy(&render(&Json::Null));
}
