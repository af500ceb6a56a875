//! The installable artifacts' definitions, where they cannot be run here: the release
//! workflow (GitHub Actions, on tags) parses and builds what the README promises; the
//! Dockerfile and deploy/tools/artifacts.sh (which CI runs: it builds and runs the image)
//! build the same image; Cargo.toml carries the metadata `cargo package` publishes.

use std::path::Path;

use serde_yaml_ng::Value;

fn read(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// Every `run:` script of every step of `job`, joined.
fn scripts(workflow: &Value, job: &str) -> String {
    workflow["jobs"][job]["steps"]
        .as_sequence()
        .unwrap_or_else(|| panic!("job {job} has no steps"))
        .iter()
        .filter_map(|s| s["run"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_release_workflow_builds_checksummed_binaries_an_sbom_and_the_image_on_tags() {
    let workflow: Value = serde_yaml_ng::from_str(&read(".github/workflows/release.yml"))
        .expect("release.yml is valid YAML");
    let tags = workflow["on"]["push"]["tags"].as_sequence().unwrap();
    assert_eq!(tags, &[Value::from("v*")]);

    let targets: Vec<&str> = workflow["jobs"]["binaries"]["strategy"]["matrix"]["include"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|entry| {
            assert!(entry["runner"].as_str().is_some(), "{entry:?}");
            entry["target"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        targets,
        [
            "x86_64-unknown-linux-gnu",
            "aarch64-unknown-linux-gnu",
            "x86_64-apple-darwin",
            "aarch64-apple-darwin"
        ]
    );
    let binaries = scripts(&workflow, "binaries");
    assert!(
        binaries.contains("cargo build --release --locked"),
        "{binaries}"
    );
    assert!(binaries.contains("sha256sum") && binaries.contains("shasum -a 256"));

    let sbom = scripts(&workflow, "sbom");
    assert!(
        sbom.contains("cargo install cargo-cyclonedx --version"),
        "{sbom}"
    );
    assert!(sbom.contains("cargo cyclonedx --format json"), "{sbom}");

    let image = scripts(&workflow, "image");
    assert!(image.contains("bash deploy/tools/artifacts.sh"), "{image}");

    let release = &workflow["jobs"]["release"];
    let needs: Vec<&str> = release["needs"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(needs, ["binaries", "sbom", "image"]);
    assert!(scripts(&workflow, "release").contains("SHA256SUMS"));
    // Every job's steps are a list of maps with `uses` or `run`.
    for (name, job) in workflow["jobs"].as_mapping().unwrap() {
        for step in job["steps"].as_sequence().unwrap() {
            assert!(
                step["uses"].as_str().is_some() || step["run"].as_str().is_some(),
                "{name:?}: {step:?}"
            );
        }
    }
}

/// Lines of `text` starting with `prefix`, the prefix cut.
fn lines_after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix(prefix))
        .map(str::trim)
        .collect()
}

#[test]
fn the_dockerfile_and_the_image_script_build_the_same_image() {
    let dockerfile = read("Dockerfile");
    let script = read("deploy/tools/artifacts.sh");
    // The release build's settings.
    for setting in [
        "CARGO_PROFILE_RELEASE_DEBUG=0",
        "CARGO_PROFILE_RELEASE_STRIP=debuginfo",
    ] {
        assert!(dockerfile.contains(setting), "Dockerfile: {setting}");
        assert!(script.contains(setting), "artifacts.sh: {setting}");
    }
    assert!(script.contains("cargo install --locked --path ."));
    // Runtime: user, ports, entrypoint, command.
    assert_eq!(lines_after(&dockerfile, "USER "), ["65532:65532"]);
    assert!(script.contains("--user 65532:65532"));
    let ports: Vec<&str> = lines_after(&dockerfile, "EXPOSE ")
        .into_iter()
        .flat_map(str::split_whitespace)
        .collect();
    assert_eq!(ports, ["4317", "4318", "8787"]);
    for port in ports {
        assert!(script.contains(&format!("--port {port}")), "port {port}");
    }
    assert_eq!(
        lines_after(&dockerfile, "ENTRYPOINT "),
        ["[\"/usr/local/bin/loopwatch\"]"]
    );
    assert!(script.contains("--entrypoint '[\"/usr/local/bin/loopwatch\"]'"));
    assert_eq!(lines_after(&dockerfile, "CMD "), ["[\"serve\"]"]);
    assert!(script.contains("--cmd serve"));
    // CI runs the script.
    assert!(read(".ci/run").contains("bash deploy/tools/artifacts.sh"));
}

#[test]
fn cargo_toml_carries_the_metadata_a_published_crate_needs() {
    let manifest: toml::Table = read("Cargo.toml").parse().unwrap();
    let package = manifest["package"].as_table().unwrap();
    for key in [
        "description",
        "license",
        "repository",
        "homepage",
        "documentation",
        "readme",
        "keywords",
        "categories",
        "rust-version",
    ] {
        assert!(package.contains_key(key), "[package] {key}");
    }
    let keywords = package["keywords"].as_array().unwrap();
    assert!(keywords.len() <= 5, "crates.io takes at most 5 keywords");
    // What the package includes is what builds: every file compiled in from outside src/.
    let include: Vec<&str> = package["include"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    for needed in [
        "/src/**",
        "/proto/**",
        "/schemas/**",
        "/build.rs",
        "/LICENSE",
    ] {
        assert!(include.contains(&needed), "include {needed}");
    }
    assert!(Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("LICENSE")
        .exists());
}
