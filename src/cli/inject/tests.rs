//! Injection of real manifest shapes: every workload kind, idempotence, opt-out, the
//! downstream taken over from the agent's own endpoint, and AdmissionReview answers.

use serde_json::json;

use super::webhook::{patch_for, review};
use super::*;

fn injected(text: &str) -> (Vec<Value>, InjectSummary) {
    let (out, summary) = inject_yaml(text, &InjectOptions::default()).unwrap();
    let docs = serde_yaml_ng::Deserializer::from_str(&out)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    (docs, summary)
}

fn env_of<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_sequence()?
        .iter()
        .find(|e| e["name"].as_str() == Some(name))?
        .get("value")?
        .as_str()
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: { name: agent }
spec:
  template:
    metadata: { labels: { app: agent } }
    spec:
      containers:
        - name: agent
          image: example/agent:1
          env:
            - { name: OTEL_EXPORTER_OTLP_ENDPOINT, value: "http://collector.obs:4317" }
            - { name: KEEP, value: "1" }
        - name: worker
          image: example/worker:1
"#;

#[test]
fn a_deployment_gets_the_sidecar_and_its_containers_point_at_it() {
    let (docs, summary) = injected(DEPLOYMENT);
    assert_eq!(
        summary,
        InjectSummary {
            injected: 1,
            skipped: 0,
            other: 0
        }
    );
    let spec = &docs[0]["spec"]["template"]["spec"];
    let sidecar = &spec["initContainers"][0];
    assert_eq!(sidecar["name"].as_str(), Some("loopwatch"));
    assert_eq!(sidecar["restartPolicy"].as_str(), Some("Always"));
    assert_eq!(
        sidecar["image"].as_str().unwrap(),
        format!("loopwatch:{}", env!("CARGO_PKG_VERSION"))
    );
    // The agent's own collector becomes loopwatch's downstream.
    assert_eq!(
        env_of(sidecar, "LOOPWATCH_EXPORTER__ENDPOINT"),
        Some("http://collector.obs:4317")
    );
    assert_eq!(
        env_of(sidecar, "LOOPWATCH_RECEIVER__GRPC_LISTEN"),
        Some("127.0.0.1:4317")
    );
    for container in spec["containers"].as_sequence().unwrap() {
        assert_eq!(
            env_of(container, "OTEL_EXPORTER_OTLP_ENDPOINT"),
            Some("http://127.0.0.1:4317")
        );
        assert_eq!(env_of(container, "OTEL_BSP_SCHEDULE_DELAY"), Some("200"));
        let names: Vec<_> = container["env"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter(|e| e["name"].as_str() == Some("OTEL_EXPORTER_OTLP_ENDPOINT"))
            .collect();
        assert_eq!(names.len(), 1, "one endpoint variable");
    }
    assert_eq!(env_of(&spec["containers"][0], "KEEP"), Some("1"));
}

#[test]
fn injecting_twice_changes_nothing_more() {
    let (out, _) = inject_yaml(DEPLOYMENT, &InjectOptions::default()).unwrap();
    let (again, summary) = inject_yaml(&out, &InjectOptions::default()).unwrap();
    assert_eq!(again, out);
    assert_eq!(
        summary,
        InjectSummary {
            injected: 0,
            skipped: 1,
            other: 0
        }
    );
}

#[test]
fn every_workload_kind_and_a_list_are_injected_and_other_objects_left_alone() {
    let pod_spec = "spec: { containers: [ { name: a, image: x } ] }";
    let text = format!(
        "kind: Pod\nmetadata: {{ name: p }}\n{pod_spec}\n---\n\
         kind: StatefulSet\nspec:\n  template:\n    {}\n---\n\
         kind: Job\nspec:\n  template:\n    {}\n---\n\
         kind: CronJob\nspec:\n  jobTemplate:\n    spec:\n      template:\n        {}\n---\n\
         kind: List\nitems:\n  - kind: DaemonSet\n    spec:\n      template:\n        {}\n---\n\
         kind: Service\nmetadata: {{ name: s }}\n---\n",
        pod_spec, pod_spec, pod_spec, pod_spec
    );
    let (docs, summary) = injected(&text);
    assert_eq!(
        summary,
        InjectSummary {
            injected: 5,
            skipped: 0,
            other: 1
        }
    );
    assert_eq!(docs.len(), 6);
    assert_eq!(
        docs[0]["spec"]["initContainers"][0]["name"].as_str(),
        Some("loopwatch")
    );
    assert_eq!(
        docs[3]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["initContainers"][0]["name"]
            .as_str(),
        Some("loopwatch")
    );
    assert_eq!(
        docs[4]["items"][0]["spec"]["template"]["spec"]["initContainers"][0]["name"].as_str(),
        Some("loopwatch")
    );
    assert!(docs[5].get("spec").is_none());
}

#[test]
fn the_disabled_annotation_opts_out() {
    let text = "kind: Deployment\nmetadata:\n  annotations: { loopwatch.dev/inject: disabled }\nspec:\n  template:\n    spec: { containers: [ { name: a } ] }\n";
    let (docs, summary) = injected(text);
    assert_eq!(
        summary,
        InjectSummary {
            injected: 0,
            skipped: 1,
            other: 0
        }
    );
    assert!(docs[0]["spec"]["template"]["spec"]
        .get("initContainers")
        .is_none());
}

#[test]
fn broken_yaml_is_an_error_naming_the_document() {
    let err = inject_yaml(
        "kind: Pod\n---\nkind: [unclosed\n",
        &InjectOptions::default(),
    )
    .unwrap_err();
    assert!(err.to_string().starts_with("document 1:"), "{err}");
}

#[test]
fn an_admission_review_of_a_pod_is_answered_with_a_patch_that_injects_it() {
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "agent-7d9", "namespace": "agents"},
        "spec": {"containers": [{"name": "agent", "image": "example/agent:1"}]}
    });
    let request = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "agents",
            "operation": "CREATE",
            "object": pod
        }
    });
    let answer = review(&request, &InjectOptions::default());
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    let response = &answer["response"];
    assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    let patch: json_patch::Patch = serde_json::from_slice(
        &base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            response["patch"].as_str().unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let mut patched = pod.clone();
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(patched["spec"]["initContainers"][0]["name"], "loopwatch");
    assert_eq!(
        patched["spec"]["containers"][0]["env"][0]["value"],
        "http://127.0.0.1:4317"
    );
    // The patched pod needs no further patch: the webhook is idempotent.
    assert!(patch_for(&patched, &InjectOptions::default()).is_none());
    let again = review(
        &json!({"request": {"uid": "x", "object": patched}}),
        &InjectOptions::default(),
    );
    assert!(again["response"].get("patch").is_none());
}

#[test]
fn the_admin_token_is_required_and_the_fingerprint_key_optional() {
    let (docs, _) = injected(DEPLOYMENT);
    let env = docs[0]["spec"]["template"]["spec"]["initContainers"][0]["env"]
        .as_sequence()
        .unwrap()
        .clone();
    let optional = |name: &str| {
        env.iter()
            .find(|e| e["name"].as_str() == Some(name))
            .and_then(|e| e["valueFrom"]["secretKeyRef"]["optional"].as_bool())
    };
    assert_eq!(optional("LOOPWATCH_ADMIN__AUTH_TOKEN"), Some(false));
    assert_eq!(optional("LOOPWATCH_DETECTION__FINGERPRINT_KEY"), Some(true));
}
