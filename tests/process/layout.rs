//! The module layout shows the span path (issue 8 item 5): every import points down,
//! receiver → span path → forward, and no top-level module imports another that imports it
//! back; inside each folder, too, no two files import each other round a circle (issue 34
//! item 6). Read from the source files, so a new upward `use crate::…` fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level module name → the top-level modules its files name as `crate::<module>`.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Module names after `crate::` in `code`, including each name of a `crate::{a, b::c}` group.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let preceded_by_ident = rest[..at].chars().next_back().is_some_and(is_ident);
        rest = &rest[at + "crate::".len()..];
        if preceded_by_ident {
            continue; // e.g. `loopwatch_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|c| is_ident(*c)).collect();
                if !name.is_empty() {
                    refs.insert(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
            if !name.is_empty() {
                refs.insert(name);
            }
        }
    }
    refs
}

/// The lines of `text` that are product code: doc and line comments go (they may link
/// upwards, "see [`crate::pipeline`]"), and so do in-file `#[cfg(test)] mod … { … }`
/// blocks, which close with a `}` in column 0.
fn product_code(text: &str) -> String {
    let mut code = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.starts_with("mod ") && next.ends_with('{'))
        {
            for inner in lines.by_ref() {
                if inner == "}" {
                    break;
                }
            }
            continue;
        }
        if !line.trim_start().starts_with("//") {
            code.push(line);
        }
    }
    code.join("\n")
}

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph = Graph::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap_or_else(|e| panic!("{e}"));
        let first = rel
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default();
        let module = first.trim_end_matches(".rs").to_owned();
        if matches!(module.as_str(), "lib" | "main" | "bin") {
            continue;
        }
        let name = rel.file_name().unwrap_or_default().to_string_lossy();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue; // test harness code may build the whole server to test one part
        }
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}"));
        let code = product_code(&text);
        let deps = graph.entry(module.clone()).or_default();
        deps.extend(crate_refs(&code).into_iter().filter(|d| *d != module));
    }
    graph
}

/// A cycle through `graph`, if there is one (as the list of modules on it).
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        graph: &Graph,
        node: &str,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(pos) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[pos..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(graph, next, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(graph, node, &mut Vec::new(), &mut done))
}

#[test]
fn crate_refs_reads_paths_and_groups() {
    let refs = crate_refs(
        "use crate::ingest::AcceptError;\nuse crate::{otlp, forward::queue};\nx = my_crate::no;",
    );
    let names: Vec<&str> = refs.iter().map(String::as_str).collect();
    assert_eq!(names, ["forward", "ingest", "otlp"]);
}

#[test]
fn product_code_leaves_out_comments_and_test_modules() {
    let code = product_code(
        "use crate::a;\n// crate::b\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\nuse crate::d;",
    );
    let refs: Vec<String> = crate_refs(&code).into_iter().collect();
    assert_eq!(refs, ["a", "d"]);
}

#[test]
fn find_cycle_finds_one() {
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(find_cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

#[test]
fn no_import_circle_between_top_level_modules() {
    let graph = graph();
    assert!(graph.contains_key("ingest") && graph.contains_key("pipeline"));
    assert_eq!(find_cycle(&graph), None, "import graph: {graph:#?}");
}

#[test]
fn arrows_point_down_the_span_path() {
    let graph = graph();
    let deps = |m: &str| graph.get(m).cloned().unwrap_or_default();
    let forbidden: &[(&str, &[&str])] = &[
        // the receiver ↔ span-path contract and the wire helpers are the bottom
        (
            "ingest",
            &["receiver", "pipeline", "forward", "engine", "config"],
        ),
        (
            "otlp",
            &["ingest", "receiver", "pipeline", "forward", "engine"],
        ),
        // receivers know the contract, not the span path or the forwarder
        (
            "receiver",
            &["pipeline", "forward", "engine", "server", "admin"],
        ),
        // the span path does not reach back into the receivers
        ("pipeline", &["receiver", "server", "admin"]),
        // the forwarder knows neither receivers nor the span path
        (
            "forward",
            &["receiver", "pipeline", "engine", "server", "admin"],
        ),
        ("metrics", &["admin", "server"]),
        // the root config layers file, env and flags over the sections components own
        ("config", &["server", "admin", "cli"]),
    ];
    for (module, not) in forbidden {
        let deps = deps(module);
        for upward in *not {
            assert!(
                !deps.contains(*upward),
                "{module} imports {upward}: {deps:?}"
            );
        }
    }
}

/// Components own their config sections and never read the root config (issue 34): only
/// the layers that build a process from it (`server`, the commands in `cli`) and the
/// admin API that shows it may import `config`.
#[test]
fn only_the_process_layers_import_the_root_config() {
    let graph = graph();
    let readers: Vec<&str> = graph
        .iter()
        .filter(|(_, deps)| deps.contains("config"))
        .map(|(module, _)| module.as_str())
        .collect();
    for module in &readers {
        assert!(
            ["server", "cli", "admin"].contains(module),
            "{module} imports the root config; readers: {readers:?}"
        );
    }
}

/// The module path of a file under `src/` (`otlp/wire/view.rs` → `otlp::wire::view`,
/// `signals/mod.rs` → `signals`).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Full module paths `code` names: `crate::a::b` as `[a, b]` (each name of a
/// `crate::a::{b, c}` group too), `super::x` and `self::x` resolved against `module`.
fn paths_named(code: &str, module: &[String]) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String { s.chars().take_while(|c| is_ident(*c)).collect() };
    let mut push = |base: Vec<String>, rest: &str| {
        let mut path = base;
        let mut rest = rest;
        loop {
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let name = ident(item.trim());
                    if !name.is_empty() {
                        let mut p = path.clone();
                        p.push(name);
                        out.insert(p);
                    }
                }
                return;
            }
            let name = ident(rest);
            if name.is_empty() {
                break;
            }
            rest = &rest[name.len()..];
            path.push(name);
            match rest.strip_prefix("::") {
                Some(after) => rest = after,
                None => break,
            }
        }
        if !path.is_empty() {
            out.insert(path);
        }
    };
    let bytes = code.as_bytes();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && is_ident(bytes[at - 1] as char) {
            continue;
        }
        push(Vec::new(), &code[at + "crate::".len()..]);
    }
    for (at, _) in code.match_indices("super::") {
        if at > 0 && (is_ident(bytes[at - 1] as char) || bytes[at - 1] == b':') {
            continue;
        }
        let mut rest = &code[at..];
        let mut base = module.to_vec();
        while let Some(after) = rest.strip_prefix("super::") {
            base.pop();
            rest = after;
        }
        push(base, rest);
    }
    for (at, _) in code.match_indices("self::") {
        if at > 0 && (is_ident(bytes[at - 1] as char) || bytes[at - 1] == b':') {
            continue;
        }
        push(module.to_vec(), &code[at + "self::".len()..]);
    }
    out
}

/// For each folder of `src/` (by module path), the graph of its direct children: child →
/// the siblings its files (its own and those below it) name. Test code is left out.
fn sibling_graphs() -> BTreeMap<String, Graph> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut refs: Vec<(Vec<String>, BTreeSet<Vec<String>>)> = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap_or_else(|e| panic!("{e}"));
        let module = module_path(rel);
        let name = rel.file_name().unwrap_or_default().to_string_lossy();
        if module.is_empty()
            || matches!(module[0].as_str(), "lib" | "main" | "bin")
            || name == "tests.rs"
            || name.ends_with("_tests.rs")
            || name == "test_support.rs"
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}"));
        refs.push((module.clone(), paths_named(&product_code(&text), &module)));
    }
    let mut graphs: BTreeMap<String, Graph> = BTreeMap::new();
    for (module, named) in &refs {
        for depth in 0..module.len() {
            let (folder, child) = (&module[..depth], &module[depth]);
            let siblings = graphs.entry(folder.join("::")).or_default();
            let deps = siblings.entry(child.clone()).or_default();
            for path in named {
                if path.len() > depth && path[..depth] == *folder && path[depth] != *child {
                    deps.insert(path[depth].clone());
                }
            }
        }
    }
    // Keep only edges to siblings that are modules (not items re-exported by the folder).
    for graph in graphs.values_mut() {
        let children: BTreeSet<String> = graph.keys().cloned().collect();
        for deps in graph.values_mut() {
            deps.retain(|d| children.contains(d));
        }
    }
    graphs
}

/// No two files (or folders) of one folder import each other, directly or round a longer
/// circle (issue 34 item 6): inside a folder, too, imports point one way.
#[test]
fn no_import_circle_inside_a_folder() {
    let graphs = sibling_graphs();
    assert!(graphs.contains_key("detector") && graphs.contains_key("otlp::wire"));
    let circles: Vec<String> = graphs
        .iter()
        .filter_map(|(folder, graph)| {
            find_cycle(graph).map(|c| format!("{}: {}", folder, c.join(" → ")))
        })
        .collect();
    assert!(circles.is_empty(), "import circles: {circles:#?}");
}

#[test]
fn paths_named_resolves_super_self_and_groups() {
    let module: Vec<String> = ["signals", "nats"].map(String::from).to_vec();
    let named = paths_named(
        "use super::sink::{Sink, DeliveryError};\nuse crate::otlp::{view, wire::decode};\nself::inner::f();",
        &module,
    );
    let names: Vec<String> = named.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        names,
        [
            "otlp::view",
            "otlp::wire",
            "signals::nats::inner::f",
            "signals::sink::DeliveryError",
            "signals::sink::Sink",
        ]
    );
}
