//! Decoding a plugin's `pluginConfig` args into its typed args struct.
//!
//! Args arrive as JSON (YAML configs are converted first). Like upstream's
//! strict decoding, unknown fields are errors: args structs use
//! `#[serde(deny_unknown_fields, rename_all = "camelCase", default)]`.
//! `apiVersion` / `kind` may be present or not; when `kind` is present it
//! must be the plugin's args kind (e.g. `NodeResourcesFitArgs`).

use serde::de::DeserializeOwned;

/// Decodes `args` (or returns `T::default()` when there are none).
///
/// # Errors
/// A message starting with the JSON path inside the args (e.g.
/// `scoringStrategy.type: unknown variant ...`), so the config loader can
/// prefix `profiles[0].pluginConfig[1].args.`.
pub fn decode_args<T: DeserializeOwned + Default>(
    args: Option<&serde_json::Value>,
    kind: &str,
) -> Result<T, String> {
    let Some(v) = args else {
        return Ok(T::default());
    };
    let mut v = v.clone();
    if v.is_null() {
        return Ok(T::default());
    }
    let Some(obj) = v.as_object_mut() else {
        return Err(format!(": expected an object ({kind}), got {v}"));
    };
    obj.remove("apiVersion");
    if let Some(k) = obj.remove("kind")
        && k.as_str() != Some(kind)
    {
        return Err(format!("kind: expected {kind:?}, got {k}"));
    }
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            format!(": {}", e.inner())
        } else {
            format!("{path}: {}", e.inner())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase", default)]
    struct DemoArgs {
        hard_pod_affinity_weight: i32,
        inner: Inner,
    }

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase", default)]
    struct Inner {
        r#type: String,
    }

    #[test]
    fn absent_args_default_and_kind_is_checked() {
        let d: DemoArgs = decode_args(None, "DemoArgs").unwrap();
        assert_eq!(d, DemoArgs::default());
        let v = serde_json::json!({"apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "DemoArgs", "hardPodAffinityWeight": 3});
        let d: DemoArgs = decode_args(Some(&v), "DemoArgs").unwrap();
        assert_eq!(d.hard_pod_affinity_weight, 3);
        let v = serde_json::json!({"kind": "OtherArgs"});
        let e = decode_args::<DemoArgs>(Some(&v), "DemoArgs").unwrap_err();
        assert!(e.starts_with("kind: "), "{e}");
    }

    #[test]
    fn errors_name_the_path() {
        let v = serde_json::json!({"inner": {"type": 5}});
        let e = decode_args::<DemoArgs>(Some(&v), "DemoArgs").unwrap_err();
        assert!(e.starts_with("inner.type: "), "{e}");
        let v = serde_json::json!({"bogus": 1});
        let e = decode_args::<DemoArgs>(Some(&v), "DemoArgs").unwrap_err();
        assert!(e.contains("unknown field `bogus`"), "{e}");
    }
}
