//! `extenders` and the profiles' `placementWebhook`: decoded, defaulted and
//! validated into [`ExtenderConfig`] / [`WebhookConfig`].
//!
//! Upstream's rules for `extenders` (`validateExtenders`, `NewHTTPExtender`,
//! `buildExtenders`): a `prioritizeVerb` needs a positive `weight`; at most
//! one extender may have a `bindVerb`; `managedResources` names are
//! extended resource names, each managed by one extender only;
//! `httpTimeout` unset or 0 is 5 s; `tlsConfig`'s `*Data` fields are
//! base64 (Go `[]byte`). Flotilla also checks, at load time rather than at
//! the first call, that `urlPrefix` is an `http(s)://` URL and that the TLS
//! settings can be used (files readable, PEM valid), so a typo is a clear
//! error naming the field instead of a failing pod.

use std::time::Duration;

use base64::Engine as _;
use flotilla_shared::extender::{DEFAULT_EXTENDER_TIMEOUT, ExtenderConfig, ManagedResource};
use flotilla_shared::http::{self, JsonClient, TlsConfig};
use flotilla_shared::resources::is_extended_resource;

use super::duration::parse_go_duration;
use super::error::FieldError;
use super::types;
use crate::framework::validation::qualified_name_errors;
use crate::webhook::{
    DEFAULT_WEBHOOK_TIMEOUT, Fallback, MAX_BATCH_PODS, WebhookBatch, WebhookConfig,
};

/// Upstream's extended-resource rule (`IsExtendedResourceName`): a
/// qualified, domain-prefixed name outside `kubernetes.io`, not
/// `requests.*` ([`is_extended_resource`]).
fn extended_resource_errors(name: &str) -> Vec<String> {
    let mut errs: Vec<String> = qualified_name_errors(name);
    if errs.is_empty() && !is_extended_resource(name) {
        errs.push("is an invalid extended resource name".into());
    }
    errs
}

/// A `metav1.Duration` field: `None` → `default`; `0` → `default` too
/// (upstream's `HTTPTimeout == 0` check); negative is an error.
fn timeout(path: &str, raw: Option<&String>, default: Duration) -> Result<Duration, FieldError> {
    let Some(text) = raw else {
        return Ok(default);
    };
    let nanos = parse_go_duration(text).map_err(|m| FieldError::new(path, m))?;
    if nanos < 0 {
        return Err(FieldError::new(
            path,
            format!("{text}: must not be negative"),
        ));
    }
    Ok(if nanos == 0 {
        default
    } else {
        Duration::from_nanos(nanos.unsigned_abs())
    })
}

/// `tlsConfig`: base64 `*Data` fields decoded, and the whole usable (a
/// client built from it).
fn tls_config(path: &str, raw: &types::ExtenderTlsConfig) -> Result<TlsConfig, FieldError> {
    let b64 = |field: &str, value: &str| -> Result<Vec<u8>, FieldError> {
        if value.is_empty() {
            return Ok(Vec::new());
        }
        base64::engine::general_purpose::STANDARD
            .decode(value.trim())
            .map_err(|e| {
                FieldError::new(
                    format!("{path}.{field}"),
                    format!("not base64 (a []byte field: the PEM, base64-encoded): {e}"),
                )
            })
    };
    let tls = TlsConfig {
        insecure: raw.insecure,
        server_name: raw.server_name.clone(),
        cert_file: raw.cert_file.clone(),
        key_file: raw.key_file.clone(),
        ca_file: raw.ca_file.clone(),
        cert_data: b64("certData", &raw.cert_data)?,
        key_data: b64("keyData", &raw.key_data)?,
        ca_data: b64("caData", &raw.ca_data)?,
    };
    Ok(tls)
}

/// A client can be built with `tls` (files read, PEM parsed).
fn check_tls(path: &str, tls: Option<&TlsConfig>) -> Result<(), FieldError> {
    JsonClient::new(tls, Duration::from_secs(1))
        .map(|_| ())
        .map_err(|e| FieldError::new(path, e.to_string()))
}

/// `extenders`, in file order.
pub(crate) fn build_extenders(raw: &[types::Extender]) -> Result<Vec<ExtenderConfig>, FieldError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut binders = 0;
    let mut managed: Vec<(String, usize)> = Vec::new();
    for (i, e) in raw.iter().enumerate() {
        let at = |rest: &str| format!("extenders[{i}].{rest}");
        if e.url_prefix.is_empty() {
            return Err(FieldError::new(at("urlPrefix"), "required"));
        }
        http::check_url(&e.url_prefix)
            .map_err(|m| FieldError::new(at("urlPrefix"), format!("{:?}: {m}", e.url_prefix)))?;
        if !e.prioritize_verb.is_empty() && e.weight <= 0 {
            return Err(FieldError::new(
                at("weight"),
                format!("{}: must have a positive weight applied to it", e.weight),
            ));
        }
        if !e.bind_verb.is_empty() {
            binders += 1;
        }
        let mut resources = Vec::with_capacity(e.managed_resources.len());
        for (j, r) in e.managed_resources.iter().enumerate() {
            let path = at(&format!("managedResources[{j}].name"));
            if let Some(msg) = extended_resource_errors(&r.name).into_iter().next() {
                return Err(FieldError::new(
                    path,
                    format!("Invalid value: {:?}: {msg}", r.name),
                ));
            }
            if let Some((_, k)) = managed.iter().find(|(n, _)| *n == r.name) {
                return Err(FieldError::new(
                    path,
                    format!(
                        "Invalid value: {:?}: duplicate extender managed resource name \
                         (also managed by extenders[{k}])",
                        r.name
                    ),
                ));
            }
            managed.push((r.name.clone(), i));
            resources.push(ManagedResource {
                name: r.name.clone(),
                ignored_by_scheduler: r.ignored_by_scheduler,
            });
        }
        let tls = e
            .tls_config
            .as_ref()
            .map(|t| tls_config(&at("tlsConfig"), t))
            .transpose()?;
        let cfg = ExtenderConfig {
            url_prefix: e.url_prefix.clone(),
            filter_verb: e.filter_verb.clone(),
            prioritize_verb: e.prioritize_verb.clone(),
            preempt_verb: e.preempt_verb.clone(),
            bind_verb: e.bind_verb.clone(),
            weight: e.weight,
            enable_https: e.enable_https,
            tls,
            http_timeout: timeout(
                &at("httpTimeout"),
                e.http_timeout.as_ref(),
                DEFAULT_EXTENDER_TIMEOUT,
            )?,
            node_cache_capable: e.node_cache_capable,
            managed_resources: resources,
            ignorable: e.ignorable,
        };
        check_tls(&at("tlsConfig"), cfg.effective_tls().as_ref())?;
        out.push(cfg);
    }
    if binders > 1 {
        return Err(FieldError::new(
            "extenders",
            format!(
                "found {binders} extenders implementing bind: only one extender can implement bind"
            ),
        ));
    }
    Ok(out)
}

/// Extended resources NodeResourcesFit must not check because an extender
/// manages them (`ignoredByScheduler: true`), in file order.
pub(crate) fn ignored_by_scheduler(extenders: &[ExtenderConfig]) -> Vec<String> {
    extenders
        .iter()
        .flat_map(|e| &e.managed_resources)
        .filter(|r| r.ignored_by_scheduler)
        .map(|r| r.name.clone())
        .collect()
}

/// A profile's `placementWebhook` (`path` = `profiles[i].placementWebhook`).
pub(crate) fn build_webhook(
    path: &str,
    raw: &types::PlacementWebhook,
) -> Result<WebhookConfig, FieldError> {
    let at = |rest: &str| format!("{path}.{rest}");
    if raw.url.is_empty() {
        return Err(FieldError::new(at("url"), "required"));
    }
    http::check_url(&raw.url)
        .map_err(|m| FieldError::new(at("url"), format!("{:?}: {m}", raw.url)))?;
    let fallback = match raw.fallback.as_deref() {
        None | Some("") | Some("InProcess") => Fallback::InProcess,
        Some("Pending") => Fallback::Pending,
        Some(other) => {
            return Err(FieldError::new(
                at("fallback"),
                format!(
                    "Unsupported value: {other:?}: supported values: \"InProcess\", \"Pending\""
                ),
            ));
        }
    };
    let timeout = timeout(
        &at("timeout"),
        raw.timeout.as_ref(),
        DEFAULT_WEBHOOK_TIMEOUT,
    )?;
    let batch = match &raw.batch {
        None => WebhookBatch::default(),
        Some(b) => {
            let max_pods = b.max_pods.unwrap_or(1);
            if !(1..=i64::try_from(MAX_BATCH_PODS).unwrap_or(i64::MAX)).contains(&max_pods) {
                return Err(FieldError::new(
                    at("batch.maxPods"),
                    format!("{max_pods}: must be between 1 and {MAX_BATCH_PODS}"),
                ));
            }
            let max_wait = match b.max_wait.as_ref() {
                None => Duration::ZERO,
                Some(text) => {
                    let nanos = parse_go_duration(text)
                        .map_err(|m| FieldError::new(at("batch.maxWait"), m))?;
                    if nanos < 0 {
                        return Err(FieldError::new(
                            at("batch.maxWait"),
                            format!("{text}: must not be negative"),
                        ));
                    }
                    Duration::from_nanos(nanos.unsigned_abs())
                }
            };
            if max_wait > timeout {
                return Err(FieldError::new(
                    at("batch.maxWait"),
                    format!(
                        "{max_wait:?}: must not exceed timeout ({timeout:?}): pods would wait \
                         longer to be sent than the service may take to answer"
                    ),
                ));
            }
            WebhookBatch {
                max_pods: usize::try_from(max_pods).unwrap_or(1),
                max_wait,
            }
        }
    };
    let tls = raw
        .tls_config
        .as_ref()
        .map(|t| tls_config(&at("tlsConfig"), t))
        .transpose()?;
    check_tls(&at("tlsConfig"), tls.as_ref())?;
    Ok(WebhookConfig {
        url: raw.url.clone(),
        timeout,
        fallback,
        node_objects: raw.node_objects,
        batch,
        tls,
    })
}

#[cfg(test)]
mod tests {
    use super::extended_resource_errors;

    #[test]
    fn extended_resource_names_follow_upstream() {
        for ok in ["example.com/gpu", "nvidia.com/gpu", "a.b/c-d"] {
            assert!(extended_resource_errors(ok).is_empty(), "{ok}");
        }
        for bad in [
            "cpu",
            "kubernetes.io/foo",
            "node.kubernetes.io/foo",
            "requests.example.com/x",
            "-bad/x",
            "",
        ] {
            assert!(!extended_resource_errors(bad).is_empty(), "{bad}");
        }
    }
}
