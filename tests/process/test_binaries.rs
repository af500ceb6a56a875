//! The integration tests are four binaries (`autotests = false` in Cargo.toml): every
//! `tests/*.rs` is one of them, declared as a `[[test]]`, and every file of its folder
//! `tests/<binary>/` is a module it declares. A test file added beside them, or a module
//! left out of its root, would otherwise never be compiled, and its tests never run.

use std::collections::BTreeSet;
use std::path::Path;

/// File stems of the `.rs` files directly in `dir`, sorted.
fn rust_stems(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_test_file_is_compiled_into_one_of_the_four_binaries() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        manifest["package"]["autotests"].as_bool(),
        Some(false),
        "Cargo.toml declares the test binaries itself"
    );
    let declared: BTreeSet<(String, String)> = manifest["test"]
        .as_array()
        .expect("[[test]] entries")
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap().to_owned();
            let path = t["path"].as_str().unwrap().to_owned();
            (name, path)
        })
        .collect();
    let binaries = ["detect", "process", "serve", "signals"];
    let want: BTreeSet<(String, String)> = binaries
        .iter()
        .map(|b| (b.to_string(), format!("tests/{b}.rs")))
        .collect();
    assert_eq!(declared, want, "[[test]] entries of Cargo.toml");
    let roots = rust_stems(&root.join("tests"));
    let want: BTreeSet<String> = binaries.iter().map(|b| b.to_string()).collect();
    assert_eq!(
        roots, want,
        "tests/*.rs: a test file goes into tests/<binary>/ and is declared in tests/<binary>.rs"
    );
    for binary in binaries {
        let text = std::fs::read_to_string(root.join(format!("tests/{binary}.rs"))).unwrap();
        let declared: BTreeSet<String> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("mod ")?.strip_suffix(';'))
            .map(str::to_owned)
            .filter(|m| m != "support")
            .collect();
        let files = rust_stems(&root.join("tests").join(binary));
        assert_eq!(
            declared, files,
            "the modules tests/{binary}.rs declares are the files of tests/{binary}/"
        );
    }
}
