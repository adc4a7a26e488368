//! The house keeps its shape. The crate graph: at most 8 floors (a crate's floor is one
//! more than the highest floor of the workspace crates it depends on), nothing depends
//! on the binary or on the HTTP layer but the binary, the model package and the API's
//! types sit on the core alone, and the client depends on the types only, besides the
//! workspace's proc macros (docs/contributing.md, "The layers"). References: no source
//! builds a `kind:name@version` string by hand; `qanat_core::ObjectRef` writes them.

use std::collections::BTreeMap;

use serde_json::Value;

/// Each workspace crate and the workspace crates it depends on (normal dependencies).
fn graph() -> BTreeMap<String, Vec<String>> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let names: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str())
                .filter(|d| names.contains(d))
                .map(str::to_string)
                .collect();
            (p["name"].as_str().expect("name").to_string(), deps)
        })
        .collect()
}

fn floor(graph: &BTreeMap<String, Vec<String>>, name: &str) -> usize {
    1 + graph[name]
        .iter()
        .map(|d| floor(graph, d))
        .max()
        .unwrap_or(0)
}

#[test]
fn the_crate_graph_has_at_most_eight_floors_and_its_bottom_and_top_where_they_belong() {
    let graph = graph();
    let floors: BTreeMap<&str, usize> = graph
        .keys()
        .map(|n| (n.as_str(), floor(&graph, n)))
        .collect();
    let highest = floors.values().max().copied().unwrap_or(0);
    assert!(
        highest <= 8,
        "the crate graph has {highest} floors: {floors:?}"
    );
    assert_eq!(floors["qanat"], highest, "{floors:?}");
    assert_eq!(floors["qanat-core"], 1, "{floors:?}");
    // The model package and the API's types sit on the core alone.
    assert_eq!(graph["qanat-model"], ["qanat-core"], "{graph:?}");
    assert_eq!(graph["qanat-types"], ["qanat-core"], "{graph:?}");
    // The client speaks the API's types: no domain crate, so no engine, is built for it.
    let mut client = graph["qanat-client"].clone();
    client.sort();
    assert_eq!(
        client,
        ["qanat-core", "qanat-macros", "qanat-types"],
        "{graph:?}"
    );
    for (name, deps) in &graph {
        if name != "qanat" {
            assert!(
                !deps.iter().any(|d| d == "qanat-api" || d == "qanat"),
                "{name} depends on the HTTP layer or the binary: {deps:?}"
            );
        }
    }
    // The model package is shared by these without their depending on each other.
    for (user, not) in [
        ("qanat-serving", "qanat-train"),
        ("qanat-serving", "qanat-features"),
        ("qanat-train", "qanat-data"),
        ("qanat-train", "qanat-jobs"),
        ("qanat-runtime", "qanat-jobs"),
        ("qanat-monitor", "qanat-runtime"),
    ] {
        assert!(
            graph[user].iter().any(|d| d == "qanat-model"),
            "{user} uses the model package"
        );
        assert!(
            !graph[user].iter().any(|d| d == not),
            "{user} depends on {not}"
        );
    }
}

/// docs/contributing.md is true to the tree: its map of the crates gives each crate's
/// floor as the graph has it, and every file and folder its recipes name is there.
#[test]
fn the_contributing_guide_is_true_to_the_tree() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("docs/contributing.md")).expect("the guide");
    let graph = graph();
    let mut mapped = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(name), Some(level)) = (words.next(), words.next()) else {
            continue;
        };
        if let (Some(name), Ok(level)) = (name.strip_suffix('/'), level.parse::<usize>()) {
            if name.starts_with("qanat") {
                mapped.insert(name.to_string(), level);
            }
        }
    }
    let actual: BTreeMap<String, usize> = graph
        .keys()
        .map(|n| (n.clone(), floor(&graph, n)))
        .collect();
    assert_eq!(mapped, actual, "the map in docs/contributing.md");
    let mut named = 0;
    for (at, _) in text.match_indices("crates/") {
        let path: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "_./-".contains(*c))
            .collect();
        let next = text[at + path.len()..].chars().next();
        if matches!(next, Some('<' | '{' | '*')) || path == "crates/" {
            continue; // a pattern: crates/qanat-<domain>/…
        }
        named += 1;
        assert!(
            root.join(&path).exists(),
            "docs/contributing.md names {path}, which is not there"
        );
    }
    assert!(named > 10, "{named} paths named");
}

/// What `qanat-client` compiles: none of the engines, drivers or clients the server
/// links, whatever feature a dependency turns on.
#[test]
fn the_client_compiles_no_engine() {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "qanat-client",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    let crates: std::collections::BTreeSet<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(crates.contains("qanat-types"), "{crates:?}");
    for engine in [
        "sqlx",
        "arrow-array",
        "parquet",
        "datafusion",
        "tract-core",
        "burn",
        "ort",
        "redis",
        "k8s-openapi",
        "object_store",
        "async-nats",
        "tokio-postgres",
    ] {
        assert!(
            !crates.contains(engine),
            "qanat-client compiles {engine}: {crates:?}"
        );
    }
}

/// Every `.rs` file under `dir`.
fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Where `line` holds a string literal with `kind:{` in it (a reference formatted by
/// hand), for any kind of reference.
fn hand_built_reference(line: &str) -> Option<&'static str> {
    let code = line.trim_start();
    if code.starts_with("//") {
        return None;
    }
    qanat_core::Kind::ALL.iter().find_map(|kind| {
        let needle = format!("{kind}:{{");
        line.match_indices(&needle).find_map(|(at, _)| {
            let before = &line[..at];
            let word_start = !before
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            let in_string = before.matches('"').count() % 2 == 1;
            (word_start && in_string).then_some(kind.as_str())
        })
    })
}

#[test]
fn no_source_builds_a_reference_by_hand() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&crates).expect("the crates folder") {
        let src = entry.expect("a crate").path().join("src");
        if src.is_dir() {
            sources(&src, &mut files);
        }
    }
    assert!(files.len() > 100, "found {} sources", files.len());
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a readable source");
        // Unit tests may spell references out: they check what is written.
        let shipped = text.split("\n#[cfg(test)]\nmod tests").next().unwrap_or("");
        for (n, line) in shipped.lines().enumerate() {
            if let Some(kind) = hand_built_reference(line) {
                found.push(format!("{}:{}: a {kind} reference", file.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "references built with format! (use qanat_core::ObjectRef, e.g. ObjectRef::dataset(name, 3)):\n{}",
        found.join("\n")
    );
}

#[test]
fn a_hand_built_reference_is_found() {
    assert_eq!(
        hand_built_reference(r#"    format!("model:{name}@{v}")"#),
        Some("model")
    );
    assert_eq!(
        hand_built_reference(r#"    "registered dataset:{}@{}","#),
        Some("dataset")
    );
    assert_eq!(
        hand_built_reference(r#"    let run = format!("{a}:{b}");"#),
        None
    );
    assert_eq!(hand_built_reference(r#"    // e.g. model:{name}@3"#), None);
    assert_eq!(hand_built_reference(r#"    let rerun:{ x }"#), None);
}
