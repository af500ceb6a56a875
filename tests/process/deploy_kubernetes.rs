//! The Kubernetes layouts in `deploy/kubernetes/` render with `kubectl kustomize`, pass
//! `deploy/tools/validate-manifests.py` (strict schemas for Kubernetes 1.29 and 1.37, the
//! Prometheus Operator's CRDs; a kind without a schema fails), and keep the properties the
//! deploy guide promises: native sidecar with probes, restricted security context,
//! resources, namespaces from the overlay only, an admin listener on the pod IP only
//! behind the admin token, the gateway's headless Service, PodDisruptionBudget, HPA,
//! NetworkPolicy and ServiceMonitor that select what they mean to, the sidecar's
//! PodMonitor, the PrometheusRule equal to `deploy/prometheus/rules.yaml`, collector RBAC
//! and `memory_limiter`; every `LOOPWATCH_*` env var a manifest sets is accepted by
//! `loopwatch check-config` on the shipped config. A missing tool fails every test here
//! when `CI` is set.

use std::path::Path;
use std::process::Command;

use crate::support::ops::{check_env_accepted, repo, run, tool, validate_manifests, yaml_docs};
use serde_json::Value as Json;

/// Renders an overlay, validates it, and returns its objects as JSON; `None` (skipped)
/// when a tool is missing outside CI.
fn render(overlay: &str) -> Option<Vec<Json>> {
    let kubectl = tool("kubectl", &[], "renders the Kustomize overlays")?;
    let dir = repo().join("deploy/kubernetes").join(overlay);
    let yaml = run(Command::new(kubectl).arg("kustomize").arg(&dir));
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), &yaml).unwrap();
    let report = validate_manifests(tmp.path())?;
    let objects = yaml_docs(tmp.path());
    assert!(
        report.contains(&format!("{n} of {n} objects valid", n = objects.len())),
        "{overlay}: not every object validated:\n{report}"
    );
    Some(objects)
}

/// The groups of `deploy/prometheus/rules.yaml`.
fn source_rule_groups() -> Json {
    yaml_docs(&repo().join("deploy/prometheus/rules.yaml"))[0]["groups"].clone()
}

fn find<'a>(objects: &'a [Json], kind: &str, name: &str) -> &'a Json {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name} rendered"))
}

fn named<'a>(list: &'a Json, name: &str) -> &'a Json {
    list.as_array()
        .and_then(|l| l.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

fn env_value<'a>(container: &'a Json, name: &str) -> Option<&'a str> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

/// The `secretKeyRef` of the container's fingerprint-key env var.
fn fingerprint_key_ref(container: &Json) -> &Json {
    let env = container["env"]
        .as_array()
        .and_then(|env| {
            env.iter()
                .find(|e| e["name"] == "LOOPWATCH_DETECTION__FINGERPRINT_KEY")
        })
        .unwrap_or_else(|| panic!("no fingerprint key on {}", container["name"]));
    let secret = &env["valueFrom"]["secretKeyRef"];
    assert_eq!(secret["name"], "loopwatch");
    assert_eq!(secret["key"], "fingerprint-key");
    secret
}

/// The container's `secretKeyRef` for env var `name`.
fn secret_ref<'a>(container: &'a Json, name: &str) -> &'a Json {
    &container["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == name))
        .unwrap_or_else(|| panic!("no {name} on {}", container["name"]))["valueFrom"]
        ["secretKeyRef"]
}

/// The checks every loopwatch container passes, sidecar or gateway.
fn check_loopwatch_container(c: &Json, pod: &Json) {
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        assert!(c[probe]["httpGet"]["path"].is_string(), "{probe} missing");
    }
    assert_eq!(c["startupProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert!(c["resources"]["requests"]["memory"].is_string());
    assert!(c["resources"]["limits"]["memory"].is_string());
    // Kubelet probes and Prometheus need the admin listener on the pod IP, so it is
    // behind the admin token, from the Secret, required (no pod serves run data open).
    assert_eq!(
        env_value(c, "LOOPWATCH_ADMIN__LISTEN"),
        Some("0.0.0.0:8787")
    );
    let token = secret_ref(c, "LOOPWATCH_ADMIN__AUTH_TOKEN");
    assert_eq!(token["name"], "loopwatch");
    assert_eq!(token["key"], "admin-token");
    assert_eq!(token["optional"], false);
    // Probes use the container's own admin port, by name.
    let admin_port = c["startupProbe"]["httpGet"]["port"].as_str().unwrap();
    assert!(
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == admin_port && p["containerPort"] == 8787),
        "probe port {admin_port} is not the admin port: {}",
        c["ports"]
    );
    assert!(
        c["image"].as_str().unwrap().contains("/loopwatch:"),
        "image not set by the overlay: {}",
        c["image"]
    );
    // The drain on SIGTERM fits in the grace period.
    assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap() > 20);
    check_env(c);
}

/// `loopwatch check-config` on the base config with the container's literal
/// `LOOPWATCH_*` env vars: a misspelt key is an error there.
fn check_env(c: &Json) {
    check_env_accepted(
        &repo().join("deploy/kubernetes/base/config.toml"),
        c,
        &[("LOOPWATCH_ADMIN__AUTH_TOKEN", "token-from-the-secret")],
    );
}

fn check_namespaces(objects: &[Json], namespace: &str) {
    for o in objects {
        assert_eq!(
            o["metadata"]["namespace"], namespace,
            "{} {}",
            o["kind"], o["metadata"]["name"]
        );
    }
}

/// No manifest names a namespace itself: the overlay's `namespace:` decides.
fn check_no_hard_coded_namespace(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap();
        if name.ends_with(".yaml") && name != "kustomization.yaml" {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                !text
                    .lines()
                    .any(|l| l.trim_start().starts_with("namespace:")),
                "{} hard-codes a namespace",
                path.display()
            );
        }
    }
}

#[test]
fn sidecar_overlay_renders_a_native_sidecar() {
    let Some(objects) = render("sidecar") else {
        return;
    };
    check_namespaces(&objects, "agents");
    check_no_hard_coded_namespace(&repo().join("deploy/kubernetes/sidecar"));
    let agent = find(&objects, "Deployment", "research-agent");
    let pod = &agent["spec"]["template"]["spec"];
    let lw = named(&pod["initContainers"], "loopwatch");
    assert_eq!(lw["restartPolicy"], "Always", "not a native sidecar");
    check_loopwatch_container(lw, pod);
    // A missing Secret must not keep the agent's pod from starting.
    assert_eq!(fingerprint_key_ref(lw)["optional"], true);
    // The agent exports to the sidecar over loopback.
    let app = named(&pod["containers"], "agent");
    assert_eq!(
        env_value(app, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        Some("http://127.0.0.1:4317")
    );
    assert_eq!(
        env_value(lw, "LOOPWATCH_RECEIVER__GRPC_LISTEN"),
        Some("127.0.0.1:4317")
    );
    // The config volume points at the generated (hash-suffixed) ConfigMap.
    let cm = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("config map");
    assert_eq!(
        named(&pod["volumes"], "loopwatch-config")["configMap"]["name"],
        cm["metadata"]["name"]
    );
    // The PodMonitor scrapes the sidecar's distinctive admin port (no agent container has
    // a port of that name), with the admin token, as job="loopwatch".
    let monitor = find(&objects, "PodMonitor", "loopwatch");
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["port"], "lw-admin");
    assert!(lw["ports"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == "lw-admin"));
    for c in pod["containers"].as_array().unwrap() {
        let ports = c["ports"].as_array().cloned().unwrap_or_default();
        assert!(!ports.iter().any(|p| p["name"] == "lw-admin"), "{c}");
    }
    check_scrape_endpoint(endpoint);
    // The rules are not in this overlay (deploy/kubernetes/monitoring carries them).
    assert!(!objects.iter().any(|o| o["kind"] == "PrometheusRule"));
}

/// A ServiceMonitor/PodMonitor endpoint: /metrics with the admin token from the Secret,
/// and the job label the alert rules read.
fn check_scrape_endpoint(endpoint: &Json) {
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["authorization"]["type"], "Bearer");
    assert_eq!(
        endpoint["authorization"]["credentials"]["name"],
        "loopwatch"
    );
    assert_eq!(
        endpoint["authorization"]["credentials"]["key"],
        "admin-token"
    );
    assert!(
        endpoint["relabelings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["targetLabel"] == "job" && r["replacement"] == "loopwatch"),
        "{endpoint}"
    );
}

/// Whether every `matchLabels` pair is among `labels`.
fn selects(match_labels: &Json, labels: &Json) -> bool {
    match_labels
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| &labels[k] == v)
}

#[test]
fn monitoring_overlay_carries_the_rules_alone() {
    let Some(objects) = render("monitoring") else {
        return;
    };
    assert_eq!(objects.len(), 1, "{objects:?}");
    let rule = find(&objects, "PrometheusRule", "loopwatch");
    assert_eq!(rule["metadata"]["namespace"], "monitoring");
    assert_eq!(rule["spec"]["groups"], source_rule_groups());
}

#[test]
fn gateway_overlay_renders_replicas_collector_rbac_and_operations() {
    let Some(objects) = render("gateway") else {
        return;
    };
    check_namespaces(&objects, "loopwatch");
    check_no_hard_coded_namespace(&repo().join("deploy/kubernetes/gateway"));
    check_no_hard_coded_namespace(&repo().join("deploy/kubernetes/components/prometheus-rules"));
    let deploy = find(&objects, "Deployment", "loopwatch");
    let pod = &deploy["spec"]["template"]["spec"];
    let pod_labels = &deploy["spec"]["template"]["metadata"]["labels"];
    let lw = named(&pod["containers"], "loopwatch");
    check_loopwatch_container(lw, pod);
    // The HPA owns the replica count (a replicas field would reset it on every apply).
    assert!(deploy["spec"]["replicas"].is_null(), "{}", deploy["spec"]);
    let hpa = find(&objects, "HorizontalPodAutoscaler", "loopwatch");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "loopwatch");
    let (min, max) = (
        hpa["spec"]["minReplicas"].as_u64().unwrap(),
        hpa["spec"]["maxReplicas"].as_u64().unwrap(),
    );
    assert!(min >= 2 && max > min, "{min}..{max}");
    assert!(
        hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"].as_u64() >= Some(300)
    );

    // The NetworkPolicy applies to the replicas, lets the collector tier send OTLP and
    // opens the admin port (by its name in the container) to Prometheus only.
    let policy = find(&objects, "NetworkPolicy", "loopwatch");
    assert!(selects(
        &policy["spec"]["podSelector"]["matchLabels"],
        pod_labels
    ));
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    let collector_labels = &find(&objects, "Deployment", "otel-collector-lb")["spec"]["template"]
        ["metadata"]["labels"];
    let container_ports: Vec<&str> = lw["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for rule in ingress {
        for port in rule["ports"].as_array().unwrap() {
            assert!(
                container_ports.contains(&port["port"].as_str().unwrap()),
                "{port}"
            );
        }
    }
    let otlp = ingress
        .iter()
        .find(|r| r["ports"][0]["port"] == "otlp-grpc")
        .expect("OTLP rule");
    assert!(otlp["from"]
        .as_array()
        .unwrap()
        .iter()
        .any(|peer| selects(&peer["podSelector"]["matchLabels"], collector_labels)));
    let admin = ingress
        .iter()
        .find(|r| r["ports"][0]["port"] == "admin")
        .expect("admin rule");
    assert!(!admin["from"].as_array().unwrap().is_empty());

    // The ServiceMonitor selects exactly the headless Service, whose admin port it scrapes.
    let monitor = find(&objects, "ServiceMonitor", "loopwatch");
    let selected: Vec<&Json> = objects
        .iter()
        .filter(|o| {
            o["kind"] == "Service"
                && selects(
                    &monitor["spec"]["selector"]["matchLabels"],
                    &o["metadata"]["labels"],
                )
        })
        .collect();
    assert_eq!(selected.len(), 1, "{selected:?}");
    assert_eq!(selected[0]["metadata"]["name"], "loopwatch-headless");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert!(selected[0]["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == endpoint["port"]));
    check_scrape_endpoint(endpoint);
    let rule = find(&objects, "PrometheusRule", "loopwatch");
    assert_eq!(rule["spec"]["groups"], source_rule_groups());
    // Replicas with keys of their own would fingerprint the same call differently: no
    // replica starts without the shared Secret.
    assert_eq!(fingerprint_key_ref(lw)["optional"], false);

    let headless = find(&objects, "Service", "loopwatch-headless");
    assert_eq!(headless["spec"]["clusterIP"], "None");
    let pdb = find(&objects, "PodDisruptionBudget", "loopwatch");
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deploy["spec"]["selector"]["matchLabels"]
    );

    // RBAC for the collector's k8s resolver, bound to the collector's service account.
    let role = find(&objects, "Role", "otel-collector-lb");
    let resources: Vec<&str> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["resources"].as_array().unwrap())
        .filter_map(|r| r.as_str())
        .collect();
    assert!(resources.contains(&"endpointslices") && resources.contains(&"endpoints"));
    let binding = find(&objects, "RoleBinding", "otel-collector-lb");
    assert_eq!(binding["subjects"][0]["namespace"], "loopwatch");
    let collector = find(&objects, "Deployment", "otel-collector-lb");
    assert_eq!(
        collector["spec"]["template"]["spec"]["serviceAccountName"],
        "otel-collector-lb"
    );

    // The collector config: memory_limiter first, loadbalancing keyed by traceID, the
    // resolver pointed at the headless Service in the pod's own namespace.
    let cm = objects
        .iter()
        .find(|o| {
            o["kind"] == "ConfigMap"
                && o["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("otel-collector-lb-config")
        })
        .expect("collector config map");
    let config = cm["data"]["collector-config.yaml"].as_str().unwrap();
    assert!(config.contains("processors: [memory_limiter, batch]"));
    assert!(config.contains("routing_key: traceID"));
    assert!(config.contains("service: loopwatch-headless.${env:POD_NAMESPACE}"));
}

/// The admission webhook's layout: every object valid (cert-manager's Certificate and
/// Issuer too), the webhook configuration calls the Service that selects the webhook's
/// pods, a webhook that is down never blocks pods, and the certificate names that Service.
#[test]
fn webhook_overlay_renders_a_reachable_webhook() {
    let Some(objects) = render("webhook") else {
        return;
    };
    let deploy = find(&objects, "Deployment", "loopwatch-webhook");
    let pod_labels = &deploy["spec"]["template"]["metadata"]["labels"];
    let config = find(&objects, "MutatingWebhookConfiguration", "loopwatch-inject");
    let webhooks = config["webhooks"].as_array().unwrap();
    assert!(!webhooks.is_empty());
    for hook in webhooks {
        let service = &hook["clientConfig"]["service"];
        let svc = find(&objects, "Service", service["name"].as_str().unwrap());
        assert_eq!(svc["metadata"]["namespace"], service["namespace"], "{hook}");
        assert!(selects(&svc["spec"]["selector"], pod_labels), "{svc}");
        assert_eq!(
            hook["failurePolicy"], "Ignore",
            "a webhook outage must not block pods"
        );
        assert_eq!(hook["sideEffects"], "None");
    }
    let cert = find(&objects, "Certificate", "loopwatch-webhook");
    let svc = &webhooks[0]["clientConfig"]["service"];
    let dns = format!(
        "{}.{}.svc",
        svc["name"].as_str().unwrap(),
        svc["namespace"].as_str().unwrap()
    );
    assert!(
        cert["spec"]["dnsNames"]
            .as_array()
            .unwrap()
            .contains(&Json::from(dns.clone())),
        "{dns} not in {}",
        cert["spec"]["dnsNames"]
    );
}
