//! `loopwatch inject` and `loopwatch webhook` as a user runs them: the shipped sidecar-less
//! agent Deployment through `inject` on stdin, and a real AdmissionReview over HTTPS to the
//! webhook process.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::json;

fn loopwatch() -> Command {
    support::spans::loopwatch()
}

#[test]
fn inject_reads_stdin_writes_the_manifests_and_says_what_it_did() {
    let manifests = "apiVersion: apps/v1\nkind: Deployment\nmetadata: { name: agent }\nspec:\n  template:\n    spec:\n      containers:\n        - { name: agent, image: example/agent:1 }\n---\napiVersion: v1\nkind: Service\nmetadata: { name: agent }\n";
    let mut child = loopwatch()
        .args(["inject", "--image", "example/loopwatch:test", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifests.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("image: example/loopwatch:test"), "{stdout}");
    assert!(stdout.contains("restartPolicy: Always"), "{stdout}");
    assert_eq!(
        stdout.matches("\n---\n").count() + usize::from(stdout.starts_with("---")),
        1
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("1 pod spec(s) injected, 0 already had loopwatch or opted out, 1 other object(s) unchanged"),
        "{stderr}"
    );
    // Its output through inject again: nothing more to do.
    let mut again = loopwatch()
        .args(["inject", "--image", "example/loopwatch:test"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    again
        .stdin
        .take()
        .unwrap()
        .write_all(stdout.as_bytes())
        .unwrap();
    let again = again.wait_with_output().unwrap();
    assert_eq!(String::from_utf8(again.stdout).unwrap(), stdout);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("0 pod spec(s) injected, 1 already had")
    );
}

#[tokio::test]
async fn the_webhook_answers_an_admission_review_over_https() {
    let pki = support::security::Pki::new();
    let mut child = loopwatch()
        .args(["webhook", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&pki.server_cert)
        .arg("--tls-key")
        .arg(&pki.server_key)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let url = loop {
        assert!(Instant::now() < deadline, "the webhook did not start");
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            if let Some(url) = line.strip_prefix("loopwatch webhook listening on ") {
                break url.replace("127.0.0.1", "localhost");
            }
        }
    };
    let client = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&support::security::Pki::read(&pki.ca)).unwrap(),
        )
        .build()
        .unwrap();
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "b2b6a3c1-1111-4c4c-9d9d-123456789abc",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "agents",
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "agent-", "namespace": "agents"},
                "spec": {"containers": [{"name": "agent", "image": "example/agent:1"}]}
            }
        }
    });
    let answer: serde_json::Value = client
        .post(&url)
        .json(&review)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let response = &answer["response"];
    assert_eq!(response["uid"], "b2b6a3c1-1111-4c4c-9d9d-123456789abc");
    assert_eq!(response["allowed"], true);
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    let patch: serde_json::Value = serde_json::from_slice(&patch).unwrap();
    let text = patch.to_string();
    assert!(text.contains("\"/spec/initContainers\""), "{text}");
    assert!(text.contains("http://127.0.0.1:4317"), "{text}");
}

/// The shipped webhook overlay renders with kubectl's kustomize, and points the API server
/// at the path and port the webhook serves.
#[test]
fn the_webhook_manifests_render_and_match_the_served_path() {
    let kubectl = match Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
    {
        Ok(out) if out.status.success() => "kubectl",
        _ if std::env::var_os("CI").is_some() => panic!("kubectl is needed under CI"),
        _ => {
            eprintln!("SKIPPED: kubectl not installed (CI fails here)");
            return;
        }
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/webhook");
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_slice(&out.stdout)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    for kind in [
        "Deployment",
        "Service",
        "MutatingWebhookConfiguration",
        "PodDisruptionBudget",
    ] {
        assert!(kinds.contains(&kind), "{kinds:?}");
    }
    let config = docs
        .iter()
        .find(|d| d["kind"] == "MutatingWebhookConfiguration")
        .unwrap();
    for hook in config["webhooks"].as_array().unwrap() {
        assert_eq!(hook["clientConfig"]["service"]["path"], "/mutate");
        assert_eq!(hook["failurePolicy"], "Ignore");
    }
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--listen=0.0.0.0:8443"), "{args}");
}
