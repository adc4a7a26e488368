//! `qanat lineage REF`: where an object came from.

use anyhow::Result;
use serde_json::Value;

use crate::cli::Format;
use crate::client::{seg, Client};

/// `qanat lineage REF`: the upstream graph as a tree.
pub(crate) async fn lineage(
    c: &Client,
    fmt: Format,
    project: &str,
    reference: &str,
    depth: usize,
) -> Result<()> {
    let g: Value = c
        .get(&format!(
            "/api/v1/projects/{}/lineage?ref={}&depth={depth}",
            seg(project),
            seg(reference)
        ))
        .await?;
    if fmt == Format::Json {
        println!("{}", serde_json::to_string_pretty(&g)?);
        return Ok(());
    }
    let edges: Vec<(String, String, String)> = g["edges"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
            (s("child"), s("relation"), s("parent"))
        })
        .collect();
    fn walk(node: &str, edges: &[(String, String, String)], prefix: &str, seen: &mut Vec<String>) {
        let kids: Vec<_> = edges.iter().filter(|(c, _, _)| c == node).collect();
        for (i, (_, rel, parent)) in kids.iter().enumerate() {
            let last = i + 1 == kids.len();
            println!(
                "{prefix}{}{rel}: {parent}",
                if last { "└─ " } else { "├─ " }
            );
            if !seen.contains(parent) {
                seen.push(parent.clone());
                let next = format!("{prefix}{}", if last { "   " } else { "│  " });
                walk(parent, edges, &next, seen);
            }
        }
    }
    let root = g["root"].as_str().unwrap_or(reference);
    println!("{root}");
    walk(root, &edges, "", &mut vec![root.to_string()]);
    if g["truncated"].as_bool() == Some(true) {
        println!("(more above; raise --depth)");
    }
    Ok(())
}
