//! `qanat lineage REF`: where an object came from, as a tree.

use anyhow::Result;
use qanat_governance::{LineageEdge, LineageGraph};

use super::Ctx;
use crate::cli::{Format, LineageArgs};
use crate::output;

pub async fn run(ctx: &Ctx, args: LineageArgs) -> Result<()> {
    let g = ctx
        .client
        .lineage(&args.project, &args.reference, Some(args.depth))
        .await?;
    if ctx.format == Format::Json {
        return output::json(&g);
    }
    print!("{}", tree(&g));
    Ok(())
}

/// The graph as an indented tree from its root upwards; a node reached twice is shown
/// again but not walked again.
fn tree(g: &LineageGraph) -> String {
    fn walk(
        node: &str,
        edges: &[LineageEdge],
        prefix: &str,
        seen: &mut Vec<String>,
        out: &mut String,
    ) {
        let parents: Vec<&LineageEdge> = edges.iter().filter(|e| e.child == node).collect();
        for (i, e) in parents.iter().enumerate() {
            let last = i + 1 == parents.len();
            let branch = if last { "└─ " } else { "├─ " };
            out.push_str(&format!("{prefix}{branch}{}: {}\n", e.relation, e.parent));
            if !seen.contains(&e.parent) {
                seen.push(e.parent.clone());
                let next = format!("{prefix}{}", if last { "   " } else { "│  " });
                walk(&e.parent, edges, &next, seen, out);
            }
        }
    }
    let mut out = format!("{}\n", g.root);
    walk(&g.root, &g.edges, "", &mut vec![g.root.clone()], &mut out);
    if g.truncated {
        out.push_str("(more above; raise --depth)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(child: &str, relation: &str, parent: &str) -> LineageEdge {
        LineageEdge {
            child: child.into(),
            parent: parent.into(),
            relation: relation.into(),
        }
    }

    #[test]
    fn the_tree_walks_each_node_once() {
        let g = LineageGraph {
            root: "dataset:clean@1".into(),
            edges: vec![
                edge("dataset:clean@1", "derived_from", "dataset:raw@2"),
                edge("dataset:clean@1", "produced_by", "user:ann"),
                edge("dataset:raw@2", "previous_version", "dataset:raw@1"),
                edge("dataset:raw@2", "produced_by", "user:ann"),
            ],
            truncated: true,
        };
        assert_eq!(
            tree(&g),
            "dataset:clean@1\n\
             ├─ derived_from: dataset:raw@2\n\
             │  ├─ previous_version: dataset:raw@1\n\
             │  └─ produced_by: user:ann\n\
             └─ produced_by: user:ann\n\
             (more above; raise --depth)\n"
        );
    }
}
