//! The crate graph keeps its shape: at most 8 floors (a crate's floor is one more than
//! the highest floor of the workspace crates it depends on), nothing depends on the
//! binary or on the HTTP layer but the binary, and the model package sits at the
//! bottom (docs/contributing.md, "The layers").

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
    assert_eq!(floors["qanat-model"], 1, "{floors:?}");
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
