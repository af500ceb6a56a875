//! `loopwatch inject`: adds loopwatch as a native sidecar (an init container with
//! `restartPolicy: Always`, Kubernetes ≥ 1.29) to every pod spec of Kubernetes manifests,
//! and points the pod's containers at it. The same mutation serves the admission webhook
//! (`loopwatch webhook`, [`webhook`]).
//!
//! What a pod spec gets ([`inject_pod_spec`]):
//! - an init container `loopwatch` with OTLP receivers on loopback (`127.0.0.1:4317`/`4318`),
//!   the admin listener on the pod IP (`0.0.0.0:8787`: probes and Prometheus reach it) behind
//!   the token of Secret `<secret>` key `admin-token` (required: the pod does not start
//!   without it, as in every shipped manifest), the fingerprint key from key
//!   `fingerprint-key` (optional: without it loopwatch draws one and warns), startup,
//!   liveness and readiness probes, and a restricted security context;
//! - on every app container: `OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317`,
//!   `OTEL_EXPORTER_OTLP_PROTOCOL=grpc` and `OTEL_BSP_SCHEDULE_DELAY=200` (tool spans within
//!   200 ms, so a loop is seen in time). An endpoint a container already had becomes
//!   loopwatch's downstream (`LOOPWATCH_EXPORTER__ENDPOINT`), so every span still reaches it.
//!
//! Idempotent: a pod spec that already has a container named `loopwatch` is left alone, and
//! so is one annotated `loopwatch.dev/inject: disabled`.

pub mod webhook;

use serde_yaml_ng::{Mapping, Value};

/// Name of the sidecar container; its presence makes injection a no-op.
pub const CONTAINER: &str = "loopwatch";
/// Annotation (on the workload or its pod template) that turns injection off: `disabled`.
pub const ANNOTATION: &str = "loopwatch.dev/inject";

/// What the sidecar is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InjectOptions {
    /// Container image of loopwatch.
    pub image: String,
    /// Downstream OTLP endpoint loopwatch forwards to; `None`: the endpoint the app
    /// containers had, else none (detect only).
    pub exporter_endpoint: Option<String>,
    /// Secret (in the pod's namespace) holding `admin-token` and `fingerprint-key`.
    pub secret: String,
    /// Redis URL for signals, when set.
    pub redis_url: Option<String>,
}

impl Default for InjectOptions {
    fn default() -> Self {
        InjectOptions {
            image: format!("loopwatch:{}", env!("CARGO_PKG_VERSION")),
            exporter_endpoint: None,
            secret: "loopwatch".into(),
            redis_url: None,
        }
    }
}

/// What injecting a set of manifests did, for the command's closing line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InjectSummary {
    /// Pod specs that got the sidecar.
    pub injected: usize,
    /// Pod specs that already had it, or were annotated `disabled`.
    pub skipped: usize,
    /// Documents without a pod spec (Services, ConfigMaps, …), left as they were.
    pub other: usize,
}

/// A manifest stream that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    #[error("document {index}: {source}")]
    Yaml {
        index: usize,
        source: serde_yaml_ng::Error,
    },
}

/// Injects every document of a multi-document YAML stream; returns the stream with each
/// document re-written (`---` between them; comments are not kept) and the summary.
pub fn inject_yaml(
    text: &str,
    options: &InjectOptions,
) -> Result<(String, InjectSummary), InjectError> {
    let mut summary = InjectSummary::default();
    let mut out = String::new();
    for (index, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let mut value = serde::Deserialize::deserialize(document)
            .map_err(|source| InjectError::Yaml { index, source })?;
        if matches!(value, Value::Null) {
            continue; // an empty document (a trailing `---`)
        }
        inject_object(&mut value, options, &mut summary);
        if !out.is_empty() {
            out.push_str("---\n");
        }
        out.push_str(
            &serde_yaml_ng::to_string(&value)
                .map_err(|source| InjectError::Yaml { index, source })?,
        );
    }
    Ok((out, summary))
}

/// Injects one Kubernetes object (a `List` item by item): its pod spec, wherever its kind
/// keeps one.
pub fn inject_object(object: &mut Value, options: &InjectOptions, summary: &mut InjectSummary) {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if kind == "List" {
        if let Some(Value::Sequence(items)) = object.get_mut("items") {
            for item in items {
                inject_object(item, options, summary);
            }
        }
        return;
    }
    let disabled_here = is_disabled(object.get("metadata"));
    let path: &[&str] = match kind.as_str() {
        "Pod" => &[],
        "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "Job"
        | "ReplicationController" => &["spec", "template"],
        "CronJob" => &["spec", "jobTemplate", "spec", "template"],
        _ => {
            summary.other += 1;
            return;
        }
    };
    let Some(template) = path.iter().try_fold(&mut *object, |v, key| v.get_mut(*key)) else {
        summary.other += 1;
        return;
    };
    if disabled_here || is_disabled(template.get("metadata")) {
        summary.skipped += 1;
        return;
    }
    match template
        .get_mut("spec")
        .map(|spec| inject_pod_spec(spec, options))
    {
        Some(true) => summary.injected += 1,
        Some(false) => summary.skipped += 1,
        None => summary.other += 1,
    }
}

/// Whether `metadata.annotations` turns injection off.
fn is_disabled(metadata: Option<&Value>) -> bool {
    metadata
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get(ANNOTATION))
        .and_then(Value::as_str)
        .is_some_and(|v| v.eq_ignore_ascii_case("disabled") || v.eq_ignore_ascii_case("false"))
}

/// Adds the sidecar to a pod spec and points its containers at it; `false` (nothing
/// changed) when a container named [`CONTAINER`] is already there or the spec is not a
/// mapping.
pub fn inject_pod_spec(spec: &mut Value, options: &InjectOptions) -> bool {
    let Value::Mapping(spec) = spec else {
        return false;
    };
    let has_sidecar = ["initContainers", "containers"].iter().any(|list| {
        spec.get(*list)
            .and_then(Value::as_sequence)
            .is_some_and(|l| {
                l.iter()
                    .any(|c| c.get("name").and_then(Value::as_str) == Some(CONTAINER))
            })
    });
    if has_sidecar {
        return false;
    }
    let mut downstream = options.exporter_endpoint.clone();
    if let Some(Value::Sequence(containers)) = spec.get_mut("containers") {
        for container in containers.iter_mut() {
            let previous = point_at_loopwatch(container);
            if downstream.is_none() {
                downstream = previous;
            }
        }
    }
    let sidecar = sidecar(options, downstream.as_deref());
    match spec.get_mut("initContainers") {
        Some(Value::Sequence(init)) => init.push(sidecar),
        _ => {
            spec.insert("initContainers".into(), Value::Sequence(vec![sidecar]));
        }
    }
    true
}

/// Sets the OTLP export variables of `container` to loopwatch on loopback; returns the
/// endpoint it had before, unless that was loopback already.
fn point_at_loopwatch(container: &mut Value) -> Option<String> {
    let Value::Mapping(container) = container else {
        return None;
    };
    let env = container
        .entry("env".into())
        .or_insert_with(|| Value::Sequence(Vec::new()));
    let Value::Sequence(env) = env else {
        return None;
    };
    let previous = env
        .iter()
        .find(|e| e.get("name").and_then(Value::as_str) == Some("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .and_then(|e| e.get("value"))
        .and_then(Value::as_str)
        .filter(|v| !v.contains("127.0.0.1") && !v.contains("localhost"))
        .map(str::to_owned);
    for (name, value) in [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "200"),
    ] {
        env.retain(|e| e.get("name").and_then(Value::as_str) != Some(name));
        env.push(env_var(name, value));
    }
    previous
}

fn env_var(name: &str, value: &str) -> Value {
    let mut m = Mapping::new();
    m.insert("name".into(), name.into());
    m.insert("value".into(), value.into());
    Value::Mapping(m)
}

fn secret_var(name: &str, secret: &str, key: &str, optional: bool) -> Value {
    let yaml = format!(
        "name: {name}\nvalueFrom:\n  secretKeyRef:\n    name: {secret}\n    key: {key}\n    optional: {optional}\n"
    );
    serde_yaml_ng::from_str(&yaml).expect("a fixed mapping")
}

/// The sidecar container (the shape of `deploy/kubernetes/sidecar/agent-deployment.yaml`).
fn sidecar(options: &InjectOptions, downstream: Option<&str>) -> Value {
    let mut sidecar: Value = serde_yaml_ng::from_str(SIDECAR).expect("the built-in sidecar parses");
    sidecar["image"] = options.image.clone().into();
    if let Some(Value::Sequence(env)) = sidecar.get_mut("env") {
        if let Some(endpoint) = downstream {
            env.push(env_var("LOOPWATCH_EXPORTER__ENDPOINT", endpoint));
        }
        if let Some(url) = &options.redis_url {
            env.push(env_var("LOOPWATCH_SIGNALS__REDIS__URL", url));
        }
        env.push(secret_var(
            "LOOPWATCH_ADMIN__AUTH_TOKEN",
            &options.secret,
            "admin-token",
            false,
        ));
        env.push(secret_var(
            "LOOPWATCH_DETECTION__FINGERPRINT_KEY",
            &options.secret,
            "fingerprint-key",
            true,
        ));
    }
    sidecar
}

/// The sidecar without image, downstream and secrets.
const SIDECAR: &str = r#"
name: loopwatch
image: loopwatch
restartPolicy: Always
args: ["serve"]
env:
  - { name: LOOPWATCH_RECEIVER__GRPC_LISTEN, value: "127.0.0.1:4317" }
  - { name: LOOPWATCH_RECEIVER__HTTP_LISTEN, value: "127.0.0.1:4318" }
  - { name: LOOPWATCH_ADMIN__LISTEN, value: "0.0.0.0:8787" }
ports:
  - { name: lw-admin, containerPort: 8787 }
startupProbe:
  httpGet: { path: /healthz, port: 8787 }
  periodSeconds: 1
  failureThreshold: 30
livenessProbe:
  httpGet: { path: /healthz, port: 8787 }
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: { path: /readyz, port: 8787 }
  periodSeconds: 5
  failureThreshold: 2
resources:
  requests: { cpu: 50m, memory: 48Mi }
  limits: { memory: 128Mi }
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  capabilities: { drop: ["ALL"] }
"#;

#[cfg(test)]
mod tests;
