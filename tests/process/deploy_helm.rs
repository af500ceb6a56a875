//! The Helm chart `deploy/helm/loopwatch/`, rendered by the real `helm` (4.x; .ci/run
//! installs it with `deploy/tools/install-tools.sh`) in both modes and validated with
//! `deploy/tools/validate-manifests.py` (strict core schemas for Kubernetes 1.29 and 1.37,
//! the Prometheus Operator's CRDs; an unknown kind fails):
//! - gateway: Deployment with the restricted container, admin token required, no replica
//!   count beside the HPA; Services, PDB, NetworkPolicy and ServiceMonitor select what they
//!   mean to; PrometheusRule equal to `deploy/prometheus/rules.yaml` with the runbook base
//!   URL from the values; `loopwatch check-config` accepts the rendered config and env;
//! - sidecar: no workload, and a sidecar template whose container, volume and agent env
//!   make a valid Deployment out of the example agent; PodMonitor on the sidecar's port;
//! - values that cannot work stop the render with a message naming the key.
//!
//! A missing tool fails every test here when `CI` is set.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::ops::{
    check_env_accepted, in_ci, repo, run, tool, validate_manifests, yaml_docs,
};
use serde_json::{json, Value as Json};

fn chart() -> PathBuf {
    repo().join("deploy/helm/loopwatch")
}

/// `helm template` of the chart with `--set` values; the YAML, or `None` (skipped) when
/// helm is missing outside CI.
fn template(sets: &[&str]) -> Option<Result<String, String>> {
    let helm = tool("helm", &[], "renders the Helm chart")?;
    let mut cmd = Command::new(helm);
    cmd.args(["template", "lw", "--namespace", "ns"])
        .arg(chart());
    for set in sets {
        cmd.arg("--set").arg(set);
    }
    let out = cmd.output().expect("run helm");
    Some(if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    })
}

/// Renders, validates every object and returns them as JSON.
fn render(sets: &[&str]) -> Option<Vec<Json>> {
    let yaml = template(sets)?.unwrap_or_else(|e| panic!("helm template {sets:?}: {e}"));
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), &yaml).unwrap();
    let report = validate_manifests(tmp.path())?;
    let objects = yaml_docs(tmp.path());
    assert!(
        report.contains(&format!("{n} of {n} objects valid", n = objects.len())),
        "{report}"
    );
    Some(objects)
}

fn find<'a>(objects: &'a [Json], kind: &str, name: &str) -> &'a Json {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name} rendered"))
}

fn kinds(objects: &[Json]) -> Vec<String> {
    let mut kinds: Vec<String> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_string())
        .collect();
    kinds.sort();
    kinds
}

fn env<'a>(container: &'a Json, name: &str) -> &'a Json {
    container["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == name))
        .unwrap_or_else(|| panic!("no {name} on {}", container["name"]))
}

fn selects(match_labels: &Json, labels: &Json) -> bool {
    match_labels
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| &labels[k] == v)
}

/// Parses one YAML document held as text (a ConfigMap value).
fn yaml_text(text: &str) -> Json {
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), text).unwrap();
    let mut docs = yaml_docs(tmp.path());
    assert_eq!(docs.len(), 1, "{text}");
    docs.remove(0)
}

/// The checks of the loopwatch container in either mode.
fn check_container(c: &Json, admin_port: &str) {
    assert!(
        c["image"].as_str().unwrap().ends_with("/loopwatch:0.1.0"),
        "{}",
        c["image"]
    );
    assert_eq!(env(c, "LOOPWATCH_ADMIN__LISTEN")["value"], "0.0.0.0:8787");
    let token = &env(c, "LOOPWATCH_ADMIN__AUTH_TOKEN")["valueFrom"]["secretKeyRef"];
    assert_eq!(token["name"], "lw-loopwatch");
    assert_eq!(token["key"], "admin-token");
    assert_eq!(token["optional"], false);
    for (probe, path) in [
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ] {
        assert_eq!(c[probe]["httpGet"]["path"], path);
        assert_eq!(c[probe]["httpGet"]["port"], admin_port);
    }
    assert!(c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["name"] == admin_port && p["containerPort"] == 8787));
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert!(c["resources"]["limits"]["memory"].is_string());
}

/// `loopwatch check-config` on the ConfigMap's config.toml with the container's env.
fn check_config(objects: &[Json], container: &Json) {
    let cm = find(objects, "ConfigMap", "lw-loopwatch-config");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, cm["data"]["config.toml"].as_str().unwrap()).unwrap();
    check_env_accepted(
        &path,
        container,
        &[("LOOPWATCH_ADMIN__AUTH_TOKEN", "token-from-the-secret")],
    );
}

#[test]
fn helm_lint_passes_in_both_modes() {
    let Some(helm) = tool("helm", &[], "lints the Helm chart") else {
        return;
    };
    for mode in ["gateway", "sidecar"] {
        let out = run(Command::new(&helm)
            .args(["lint", "--strict", "--set"])
            .arg(format!("mode={mode}"))
            .arg(chart()));
        assert!(out.contains("0 chart(s) failed"), "{mode}: {out}");
    }
}

#[test]
fn gateway_mode_renders_replicas_with_their_operations_objects() {
    let Some(objects) = render(&[]) else {
        return;
    };
    assert_eq!(
        kinds(&objects),
        [
            "ConfigMap",
            "Deployment",
            "HorizontalPodAutoscaler",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "PrometheusRule",
            "Service",
            "Service",
            "ServiceAccount",
            "ServiceMonitor"
        ]
    );
    let deploy = find(&objects, "Deployment", "lw-loopwatch");
    let pod = &deploy["spec"]["template"]["spec"];
    let pod_labels = &deploy["spec"]["template"]["metadata"]["labels"];
    let c = &pod["containers"][0];
    check_container(c, "admin");
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(pod["automountServiceAccountToken"], false);
    let fingerprint = &env(c, "LOOPWATCH_DETECTION__FINGERPRINT_KEY")["valueFrom"]["secretKeyRef"];
    assert_eq!(fingerprint["optional"], false, "replicas share one key");
    assert_eq!(
        env(c, "LOOPWATCH_EXPORTER__QUEUE_CAPACITY")["value"],
        "1024"
    );
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"], "lw-loopwatch-config",
        "config volume"
    );
    check_config(&objects, c);

    // Autoscaled: no replicas field; the HPA scales this Deployment.
    assert!(deploy["spec"]["replicas"].is_null());
    let hpa = find(&objects, "HorizontalPodAutoscaler", "lw-loopwatch");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "lw-loopwatch");
    assert_eq!(hpa["spec"]["minReplicas"], 3);
    let pdb = find(&objects, "PodDisruptionBudget", "lw-loopwatch");
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deploy["spec"]["selector"]["matchLabels"]
    );

    // The headless Service is the one the ServiceMonitor scrapes; both select the pods.
    let headless = find(&objects, "Service", "lw-loopwatch-headless");
    assert_eq!(headless["spec"]["clusterIP"], "None");
    let monitor = find(&objects, "ServiceMonitor", "lw-loopwatch");
    let scraped: Vec<&Json> = objects
        .iter()
        .filter(|o| {
            o["kind"] == "Service"
                && selects(
                    &monitor["spec"]["selector"]["matchLabels"],
                    &o["metadata"]["labels"],
                )
        })
        .collect();
    assert_eq!(scraped.len(), 1, "one Service scraped, not every pod twice");
    assert_eq!(scraped[0]["metadata"]["name"], "lw-loopwatch-headless");
    for svc in objects.iter().filter(|o| o["kind"] == "Service") {
        assert!(selects(&svc["spec"]["selector"], pod_labels), "{svc}");
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "admin");
    assert_eq!(
        endpoint["authorization"]["credentials"]["name"],
        "lw-loopwatch"
    );
    assert_eq!(
        endpoint["authorization"]["credentials"]["key"],
        "admin-token"
    );
    assert_eq!(endpoint["relabelings"][0]["targetLabel"], "job");
    assert_eq!(endpoint["relabelings"][0]["replacement"], "loopwatch");

    // The NetworkPolicy applies to the replicas and names only their ports.
    let policy = find(&objects, "NetworkPolicy", "lw-loopwatch");
    assert!(selects(
        &policy["spec"]["podSelector"]["matchLabels"],
        pod_labels
    ));
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    let names: Vec<&Json> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["name"])
        .collect();
    for rule in policy["spec"]["ingress"].as_array().unwrap() {
        for port in rule["ports"].as_array().unwrap() {
            assert!(names.contains(&&port["port"]), "{port}");
        }
    }

    // The rules are rules.yaml's.
    let rule = find(&objects, "PrometheusRule", "lw-loopwatch");
    let source = &yaml_docs(&repo().join("deploy/prometheus/rules.yaml"))[0];
    assert_eq!(rule["spec"], *source);
}

#[test]
fn values_change_what_is_rendered() {
    let Some(objects) = render(&[
        "gateway.autoscaling.enabled=false",
        "gateway.replicas=4",
        "networkPolicy.enabled=false",
        "metrics.serviceMonitor.labels.release=kps",
        "prometheusRule.runbookBaseURL=https://wiki.example.org/loopwatch/",
        "signals.natsUrl=nats://nats.messaging:4222",
        "env.LOOPWATCH_LOG__LEVEL=debug",
    ]) else {
        return;
    };
    let deploy = find(&objects, "Deployment", "lw-loopwatch");
    assert_eq!(deploy["spec"]["replicas"], 4);
    assert!(!objects
        .iter()
        .any(|o| o["kind"] == "HorizontalPodAutoscaler"));
    assert!(!objects.iter().any(|o| o["kind"] == "NetworkPolicy"));
    let monitor = find(&objects, "ServiceMonitor", "lw-loopwatch");
    assert_eq!(monitor["metadata"]["labels"]["release"], "kps");
    let c = &deploy["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        env(c, "LOOPWATCH_SIGNALS__NATS__URL")["value"],
        "nats://nats.messaging:4222"
    );
    assert_eq!(env(c, "LOOPWATCH_LOG__LEVEL")["value"], "debug");
    check_config(&objects, c);
    let rule = find(&objects, "PrometheusRule", "lw-loopwatch");
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    assert!(rules.len() >= 10);
    for r in rules {
        assert_eq!(
            r["annotations"]["runbook_url"],
            format!(
                "https://wiki.example.org/loopwatch/{}.md",
                r["alert"].as_str().unwrap()
            )
        );
    }
}

#[test]
fn sidecar_mode_renders_an_injectable_native_sidecar() {
    let Some(objects) = render(&["mode=sidecar"]) else {
        return;
    };
    assert_eq!(
        kinds(&objects),
        ["ConfigMap", "ConfigMap", "PodMonitor", "PrometheusRule"],
        "no workload, Service or NetworkPolicy of its own in sidecar mode"
    );
    let template = &find(&objects, "ConfigMap", "lw-loopwatch-sidecar")["data"];
    let container = yaml_text(template["container.yaml"].as_str().unwrap());
    check_container(&container, "lw-admin");
    assert_eq!(container["restartPolicy"], "Always", "native sidecar");
    assert_eq!(
        env(&container, "LOOPWATCH_RECEIVER__GRPC_LISTEN")["value"],
        "127.0.0.1:4317"
    );
    assert_eq!(
        env(&container, "LOOPWATCH_RECEIVER__HTTP_LISTEN")["value"],
        "127.0.0.1:4318"
    );
    let fingerprint =
        &env(&container, "LOOPWATCH_DETECTION__FINGERPRINT_KEY")["valueFrom"]["secretKeyRef"];
    assert_eq!(
        fingerprint["optional"], true,
        "a missing key never blocks an agent"
    );
    check_config(&objects, &container);

    // The patch adds the same container and volume.
    let patch = yaml_text(template["pod-patch.yaml"].as_str().unwrap());
    let spec = &patch["spec"]["template"]["spec"];
    assert_eq!(spec["initContainers"][0], container);
    let volume = yaml_text(template["volume.yaml"].as_str().unwrap());
    assert_eq!(spec["volumes"][0], volume);
    assert_eq!(volume["configMap"]["name"], "lw-loopwatch-config");

    // Injected by hand into the example agent, the result is a valid Deployment whose
    // agent exports to the sidecar.
    let example = repo().join("deploy/kubernetes/sidecar/agent-deployment.yaml");
    let mut agent = yaml_docs(&example).remove(0);
    let pod = &mut agent["spec"]["template"]["spec"];
    pod["initContainers"] = json!([container]);
    pod["volumes"] = json!([volume]);
    pod["containers"][0]["env"] = yaml_text(template["agent-env.yaml"].as_str().unwrap());
    let injected = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(injected.path(), agent.to_string()).unwrap();
    let Some(report) = validate_manifests(injected.path()) else {
        return;
    };
    assert!(report.contains("1 of 1 objects valid"), "{report}");
    assert_eq!(
        env(
            &agent["spec"]["template"]["spec"]["containers"][0],
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )["value"],
        "http://127.0.0.1:4317"
    );

    let monitor = find(&objects, "PodMonitor", "lw-loopwatch");
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["port"], "lw-admin");
    assert_eq!(
        endpoint["authorization"]["credentials"]["key"],
        "admin-token"
    );
}

#[test]
fn admin_on_loopback_leaves_out_what_cannot_reach_it() {
    let Some(objects) = render(&["admin.listen=127.0.0.1:8787", "admin.requireToken=false"]) else {
        return;
    };
    assert!(!objects.iter().any(|o| o["kind"] == "ServiceMonitor"));
    let c =
        &find(&objects, "Deployment", "lw-loopwatch")["spec"]["template"]["spec"]["containers"][0];
    assert!(c["startupProbe"].is_null() && c["readinessProbe"].is_null());
    assert!(!c["env"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "LOOPWATCH_ADMIN__AUTH_TOKEN"));
    let policy = find(&objects, "NetworkPolicy", "lw-loopwatch");
    assert_eq!(
        policy["spec"]["ingress"].as_array().unwrap().len(),
        1,
        "no admin ingress"
    );
}

#[test]
fn values_that_cannot_work_stop_the_render_naming_the_key() {
    for (sets, says) in [
        (
            &["mode=daemonset"][..],
            "at '/mode': value must be one of 'gateway', 'sidecar'",
        ),
        (
            &["admin.requireToken=false"][..],
            "admin.requireToken: false with admin.listen \"0.0.0.0:8787\"",
        ),
        (
            &["admin.listen=0.0.0.0:9000"][..],
            "admin.port: 8787 is not the port of admin.listen",
        ),
        (
            &["gateway.autoscaling.minReplicas=20"][..],
            "minReplicas 20 is above maxReplicas 10",
        ),
        (
            &["secret.create=true"][..],
            "secret.create: set secret.fingerprintKey",
        ),
        (
            &["gateway.replica=2"][..],
            "additional properties 'replica' not allowed",
        ),
        (&["image.pullPolicy=Sometimes"][..], "pullPolicy"),
    ] {
        let Some(result) = template(sets) else {
            return;
        };
        let error = result.expect_err(&format!("{sets:?} rendered"));
        assert!(error.contains(says), "{sets:?}: {error}");
    }
}

#[test]
fn rule_copies_are_in_step_with_the_source() {
    let out = Command::new("python3")
        .arg(repo().join("deploy/tools/sync-rules.py"))
        .arg("--check")
        .output()
        .expect("run sync-rules.py");
    let said = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(3) && !in_ci() {
        eprintln!("skipped: {}", String::from_utf8_lossy(&out.stderr));
        return;
    }
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("2 of 2 copies current"), "{said}");
    let copy: &Path = &chart().join("files/rules.yaml");
    assert_eq!(
        std::fs::read_to_string(copy).unwrap(),
        std::fs::read_to_string(repo().join("deploy/prometheus/rules.yaml")).unwrap()
    );
}
