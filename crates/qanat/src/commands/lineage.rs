//! `qanat lineage REF`: where an object came from.

use anyhow::Result;

use crate::cli::Format;
use crate::client::Client;

/// `qanat lineage REF`: the upstream graph as a tree.
pub(crate) async fn lineage(
    c: &Client,
    fmt: Format,
    project: &str,
    reference: &str,
    depth: usize,
) -> Result<()> {
    let g = c.lineage(project, reference, depth).await?;
    if fmt == Format::Json {
        println!("{}", serde_json::to_string_pretty(&g)?);
        return Ok(());
    }
    let edges: Vec<(String, String, String)> = g
        .edges
        .into_iter()
        .map(|e| (e.child, e.relation, e.parent))
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
    let root = g.root.as_str();
    println!("{root}");
    walk(root, &edges, "", &mut vec![root.to_string()]);
    if g.truncated {
        println!("(more above; raise --depth)");
    }
    Ok(())
}
