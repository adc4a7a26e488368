//! Lineage: which object came from which. Every domain records its edges here, in the
//! same transaction that creates the child, and `qanat lineage` walks them upstream.

use std::collections::{BTreeSet, VecDeque};

use qanat_core::{ObjectRef, ProjectId};
use qanat_store::now_micros;
use sqlx::Row;

use crate::{Governance, Result};
use crate::{LineageEdge, LineageGraph};

/// Records `child`'s parents on an open connection or transaction.
#[qanat_macros::boxed]
pub async fn record_edges(
    conn: &mut sqlx::AnyConnection,
    project_id: &ProjectId,
    child: &ObjectRef,
    parents: &[(ObjectRef, &str)],
) -> Result<()> {
    let now = now_micros();
    let child = child.to_string();
    for (parent, relation) in parents {
        sqlx::query(
            "INSERT INTO lineage_edges (project_id, child, parent, relation, created_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (project_id, child, parent, relation) DO NOTHING",
        )
        .bind(project_id)
        .bind(&child)
        .bind(parent.to_string())
        .bind(*relation)
        .bind(now)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

impl Governance {
    /// Walks from `root` to its ancestors, breadth first, at most `depth` levels.
    #[qanat_macros::boxed]
    pub async fn lineage_upstream(
        &self,
        project_id: &ProjectId,
        root: &str,
        depth: usize,
    ) -> Result<LineageGraph> {
        let mut edges = BTreeSet::new();
        let mut seen = BTreeSet::from([root.to_string()]);
        let mut queue = VecDeque::from([(root.to_string(), 0usize)]);
        let mut truncated = false;
        while let Some((node, level)) = queue.pop_front() {
            let rows = sqlx::query("SELECT parent, relation FROM lineage_edges WHERE project_id = $1 AND child = $2 ORDER BY relation, parent")
                .bind(project_id)
                .bind(&node)
                .fetch_all(self.meta.reader())
                .await?;
            if level >= depth {
                truncated |= !rows.is_empty();
                continue;
            }
            for r in rows {
                let parent: String = r.try_get("parent")?;
                edges.insert(LineageEdge {
                    child: node.clone(),
                    parent: parent.clone(),
                    relation: r.try_get("relation")?,
                });
                if seen.insert(parent.clone()) {
                    queue.push_back((parent, level + 1));
                }
            }
        }
        Ok(LineageGraph {
            root: root.to_string(),
            edges: edges.into_iter().collect(),
            truncated,
        })
    }

    /// Walks from `root` to what came of it (the objects it is a parent of), breadth
    /// first, at most `depth` levels: the other direction of [`Self::lineage_upstream`].
    #[qanat_macros::boxed]
    pub async fn lineage_downstream(
        &self,
        project_id: &ProjectId,
        root: &str,
        depth: usize,
    ) -> Result<LineageGraph> {
        let mut edges = BTreeSet::new();
        let mut seen = BTreeSet::from([root.to_string()]);
        let mut queue = VecDeque::from([(root.to_string(), 0usize)]);
        let mut truncated = false;
        while let Some((node, level)) = queue.pop_front() {
            let rows = sqlx::query("SELECT child, relation FROM lineage_edges WHERE project_id = $1 AND parent = $2 ORDER BY relation, child LIMIT 200")
                .bind(project_id)
                .bind(&node)
                .fetch_all(self.meta.reader())
                .await?;
            if level >= depth {
                truncated |= !rows.is_empty();
                continue;
            }
            truncated |= rows.len() >= 200;
            for r in rows {
                let child: String = r.try_get("child")?;
                edges.insert(LineageEdge {
                    child: child.clone(),
                    parent: node.clone(),
                    relation: r.try_get("relation")?,
                });
                if seen.insert(child.clone()) {
                    queue.push_back((child, level + 1));
                }
            }
        }
        Ok(LineageGraph {
            root: root.to_string(),
            edges: edges.into_iter().collect(),
            truncated,
        })
    }
}
