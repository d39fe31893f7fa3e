//! Renders a Helm chart the way `helm template` does, for the subset of Helm
//! the Flotilla chart is allowed to use: Go templates (`gtmpl`, a port of Go's
//! `text/template`) with the root object `.Values` / `.Release` / `.Chart`,
//! plus three of Helm's functions, `include`, `toYaml` and `nindent`.
//!
//! Anything else (Sprig functions, `.Capabilities`, `lookup`, `tpl`, `.Files`)
//! fails to parse or to render, so the chart cannot drift into constructs this
//! check does not cover. A value the templates read but the values do not set
//! renders as `<no value>` in Go; Helm would print an empty string, here it is
//! an error naming the template.
//!
//! Helm behaviour mirrored (helm.sh/helm/v3 `pkg/engine/funcs.go`,
//! `pkg/engine/engine.go`, Sprig `strings.go`):
//! - `toYaml v`: the YAML of `v` without its final newline;
//! - `nindent n s`: a newline, then `s` with every line indented by `n`
//!   spaces (empty lines included);
//! - `include name data`: the named template (`define`) rendered with `data`
//!   as dot, returned as a string so it can be piped;
//! - values: `values.yaml` deep-merged with the overrides (maps merge key by
//!   key, anything else is replaced);
//! - templates: every `templates/*` file not starting with `_`, in name
//!   order; named templates come from every `templates/_*.tpl` file.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;

use gtmpl::{Context, Func, FuncError, Template, Value};
use serde_json::Value as Json;

thread_local! {
    /// The chart's `_*.tpl` text, for `include` (a plain `fn`, so it cannot
    /// capture the template it is called from).
    static HELPERS: RefCell<String> = const { RefCell::new(String::new()) };
}

/// The functions templates may call besides Go's builtins.
const HELM_FUNCS: [(&str, Func); 3] = [
    ("include", include as Func),
    ("toYaml", to_yaml as Func),
    ("nindent", nindent as Func),
];

/// One rendered template file.
#[derive(Debug)]
pub struct Rendered {
    /// File name under `templates/`.
    pub file: String,
    /// Rendered text.
    pub text: String,
}

/// The release the chart is rendered for.
pub struct Release<'a> {
    /// `.Release.Name`.
    pub name: &'a str,
    /// `.Release.Namespace`.
    pub namespace: &'a str,
}

/// Renders every template of the chart in `chart_dir` with its
/// `values.yaml` deep-merged with `overrides` (a JSON object, or null).
///
/// # Errors
/// A message naming the file for unreadable files, YAML that does not parse,
/// template parse or execution errors, and `<no value>` in the output.
pub fn render_chart(
    chart_dir: &Path,
    overrides: &Json,
    release: &Release<'_>,
) -> Result<Vec<Rendered>, String> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    };
    let parse_yaml = |p: &Path| -> Result<Json, String> {
        serde_saphyr::from_str::<Json>(&read(p)?)
            .map_err(|e| format!("{} is not valid YAML: {e}", p.display()))
    };
    let chart = parse_yaml(&chart_dir.join("Chart.yaml"))?;
    let mut values = parse_yaml(&chart_dir.join("values.yaml"))?;
    merge_values(&mut values, overrides);

    let chart_field = |key: &str| chart.get(key).cloned().unwrap_or(Json::Null);
    let root = serde_json::json!({
        "Values": values,
        "Release": {
            "Name": release.name,
            "Namespace": release.namespace,
            "Service": "Helm",
            "IsInstall": true,
            "IsUpgrade": false,
            "Revision": 1,
        },
        "Chart": {
            "Name": chart_field("name"),
            "Version": chart_field("version"),
            "AppVersion": chart_field("appVersion"),
            "Description": chart_field("description"),
        },
    });

    let templates_dir = chart_dir.join("templates");
    let mut files: Vec<_> = std::fs::read_dir(&templates_dir)
        .map_err(|e| format!("cannot list {}: {e}", templates_dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let name_of = |p: &Path| {
        p.file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    };

    let mut helpers = String::new();
    for p in files.iter().filter(|p| name_of(p).starts_with('_')) {
        helpers.push_str(&read(p)?);
        helpers.push('\n');
    }
    HELPERS.with(|h| h.borrow_mut().clone_from(&helpers));

    let context = Context::from(json_to_value(&root));
    let mut out = Vec::new();
    for p in files.iter().filter(|p| !name_of(p).starts_with('_')) {
        let file = name_of(p);
        let mut t = new_template(&file);
        t.add_template("_helpers", helpers.clone())
            .map_err(|e| format!("templates/_*.tpl: {e}"))?;
        t.parse(read(p)?)
            .map_err(|e| format!("templates/{file}: {e}"))?;
        let text = t
            .render(&context)
            .map_err(|e| format!("templates/{file}: {e}"))?;
        if text.contains("<no value>") {
            return Err(format!(
                "templates/{file} reads a value that is not set (rendered `<no value>`):\n{text}"
            ));
        }
        out.push(Rendered { file, text });
    }
    Ok(out)
}

/// Helm's values merge: maps merge key by key; anything else in `over`
/// replaces what is in `base`.
pub fn merge_values(base: &mut Json, over: &Json) {
    match (base, over) {
        (Json::Object(b), Json::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) => merge_values(slot, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (_, Json::Null) => {}
        (b, o) => *b = o.clone(),
    }
}

fn new_template(name: &str) -> Template {
    let mut t = Template::with_name(name);
    t.add_funcs(&HELM_FUNCS);
    t
}

/// JSON (from YAML) → template value. Objects become maps, so field access
/// (`.Values.image.tag`) and `range` work as on Helm's `map[string]any`.
pub fn json_to_value(j: &Json) -> Value {
    match j {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => {
            if let Some(u) = n.as_u64() {
                Value::from(u)
            } else if let Some(i) = n.as_i64() {
                Value::from(i)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Json::String(s) => Value::String(s.clone()),
        Json::Array(a) => Value::Array(a.iter().map(json_to_value).collect()),
        Json::Object(o) => Value::Map(
            o.iter()
                .map(|(k, v)| (k.clone(), json_to_value(v)))
                .collect::<HashMap<_, _>>(),
        ),
    }
}

/// Template value → JSON, for `toYaml`.
fn value_to_json(v: &Value) -> Result<Json, FuncError> {
    Ok(match v {
        Value::NoValue | Value::Nil => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::String(s) => Json::String(s.clone()),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Json::from(u)
            } else if let Some(i) = n.as_i64() {
                Json::from(i)
            } else {
                n.as_f64().map(Json::from).unwrap_or(Json::Null)
            }
        }
        Value::Array(a) => Json::Array(a.iter().map(value_to_json).collect::<Result<_, _>>()?),
        Value::Map(m) | Value::Object(m) => Json::Object(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), value_to_json(v)?)))
                .collect::<Result<_, FuncError>>()?,
        ),
        Value::Function(_) => {
            return Err(FuncError::Generic(
                "toYaml: cannot encode a function".into(),
            ));
        }
    })
}

/// `toYaml v`: Helm's `toYAML`, the YAML of `v` without its final newline.
fn to_yaml(args: &[Value]) -> Result<Value, FuncError> {
    let [v] = args else {
        return Err(FuncError::ExactlyXArgs("toYaml".into(), 1));
    };
    let yaml = serde_saphyr::to_string(&value_to_json(v)?)
        .map_err(|e| FuncError::Generic(format!("toYaml: {e}")))?;
    Ok(Value::String(yaml.trim_end_matches('\n').to_owned()))
}

/// `nindent n s`: Sprig's `nindent`, `"\n" + indent(n, s)` where `indent`
/// prefixes every line (empty ones too) with `n` spaces.
fn nindent(args: &[Value]) -> Result<Value, FuncError> {
    let [n, s] = args else {
        return Err(FuncError::ExactlyXArgs("nindent".into(), 2));
    };
    let Value::Number(n) = n else {
        return Err(FuncError::Generic(format!(
            "nindent: width {n} is not a number"
        )));
    };
    let width = n
        .as_u64()
        .and_then(|w| usize::try_from(w).ok())
        .ok_or_else(|| {
            FuncError::Generic("nindent: width must be a non-negative integer".into())
        })?;
    let pad = " ".repeat(width);
    let text = match s {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Ok(Value::String(format!(
        "\n{pad}{}",
        text.replace('\n', &format!("\n{pad}"))
    )))
}

/// `include name data`: the named template rendered with `data` as dot.
fn include(args: &[Value]) -> Result<Value, FuncError> {
    let [Value::String(name), data] = args else {
        return Err(FuncError::Generic(
            "include takes a template name (a string) and the data".into(),
        ));
    };
    let helpers = HELPERS.with(|h| h.borrow().clone());
    let mut t = new_template("include");
    t.add_template("_helpers", helpers)
        .map_err(|e| FuncError::Generic(format!("include {name:?}: {e}")))?;
    // A Go string literal: the name is quoted the way Rust's Debug quotes it,
    // which agrees with Go for the plain names templates use.
    t.parse(format!("{{{{ template {name:?} . }}}}"))
        .map_err(|e| FuncError::Generic(format!("include {name:?}: {e}")))?;
    let out = t
        .render(&Context::from(data.clone()))
        .map_err(|e| FuncError::Generic(format!("include {name:?}: {e}")))?;
    Ok(Value::String(out))
}
