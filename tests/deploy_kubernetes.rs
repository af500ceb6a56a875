//! The Kubernetes layouts in `deploy/kubernetes/` render with `kubectl kustomize`, pass
//! `kubernetes-validate --strict`, and keep the properties the deploy guide promises:
//! native sidecar with probes, restricted security context, resources, namespaces from the
//! overlay only, the gateway's headless Service, PodDisruptionBudget, collector RBAC and
//! `memory_limiter`; every `LOOPWATCH_*` env var a manifest sets is accepted by
//! `loopwatch check-config` on the shipped config.

mod ops_support;

use std::path::Path;
use std::process::Command;

use ops_support::{repo, run, tool};
use serde_json::Value as Json;

/// Renders an overlay and returns its objects as JSON (PyYAML, which kubernetes-validate
/// depends on, converts the multi-document YAML).
fn render(overlay: &str) -> Option<Vec<Json>> {
    let kubectl = tool("kubectl", &[], "renders the Kustomize overlays")?;
    let validate = tool("kubernetes-validate", &[], "validates the rendered objects")?;
    let dir = repo().join("deploy/kubernetes").join(overlay);
    let yaml = run(Command::new(kubectl).arg("kustomize").arg(&dir));
    let tmp = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tmp.path(), &yaml).unwrap();
    let report = run(Command::new(validate).arg("--strict").arg(tmp.path()));
    assert!(!report.contains("ERROR"), "{overlay}: {report}");
    let json = run(Command::new("python3").arg("-c").arg(
        "import json, sys, yaml\nfor d in yaml.safe_load_all(open(sys.argv[1])):\n    print(json.dumps(d))",
    ).arg(tmp.path()));
    Some(
        json.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
    )
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
    // The security defaults may bind the admin listener to loopback: kubelet probes and
    // Prometheus need it on the pod IP.
    assert_eq!(
        env_value(c, "LOOPWATCH_ADMIN__LISTEN"),
        Some("0.0.0.0:8787")
    );
    assert!(
        c["image"].as_str().unwrap().contains("/loopwatch:"),
        "image not set by the overlay: {}",
        c["image"]
    );
    // The drain on SIGTERM fits in the grace period.
    assert!(pod["terminationGracePeriodSeconds"].as_u64().unwrap() > 20);
    check_env_accepted(c);
}

/// `loopwatch check-config` on the base config with the container's literal
/// `LOOPWATCH_*` env vars: a misspelt key is an error there.
fn check_env_accepted(c: &Json) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_loopwatch"));
    cmd.arg("check-config")
        .arg(repo().join("deploy/kubernetes/base/config.toml"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("LOOPWATCH_")) {
        cmd.env_remove(k);
    }
    let mut set = 0;
    for e in c["env"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap();
        if let (true, Some(v)) = (name.starts_with("LOOPWATCH_"), e["value"].as_str()) {
            cmd.env(name, v);
            set += 1;
        }
    }
    assert!(set >= 2, "expected LOOPWATCH_* env vars on {}", c["name"]);
    let out = run(&mut cmd);
    assert!(out.contains(": ok"), "{out}");
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
}

#[test]
fn gateway_overlay_renders_replicas_collector_and_rbac() {
    let Some(objects) = render("gateway") else {
        return;
    };
    check_namespaces(&objects, "loopwatch");
    check_no_hard_coded_namespace(&repo().join("deploy/kubernetes/gateway"));
    let deploy = find(&objects, "Deployment", "loopwatch");
    let pod = &deploy["spec"]["template"]["spec"];
    let lw = named(&pod["containers"], "loopwatch");
    check_loopwatch_container(lw, pod);
    assert!(deploy["spec"]["replicas"].as_u64().unwrap() >= 2);
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
