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

/// Which way a lineage walk goes.
#[derive(Clone, Copy)]
enum Direction {
    /// To the parents: where an object came from.
    Up,
    /// To the children: what came of it.
    Down,
}

/// Children listed per object on a downstream walk (a dataset version may feed many runs).
const MAX_CHILDREN: usize = 200;

impl Governance {
    /// Walks from `root` to its ancestors, breadth first, at most `depth` levels.
    #[qanat_macros::boxed]
    pub async fn lineage_upstream(
        &self,
        project_id: &ProjectId,
        root: &str,
        depth: usize,
    ) -> Result<LineageGraph> {
        self.lineage_walk(project_id, root, depth, Direction::Up)
            .await
    }

    /// Walks from `root` to what came of it (the objects it is a parent of), breadth
    /// first, at most `depth` levels and [`MAX_CHILDREN`] children of each object.
    #[qanat_macros::boxed]
    pub async fn lineage_downstream(
        &self,
        project_id: &ProjectId,
        root: &str,
        depth: usize,
    ) -> Result<LineageGraph> {
        self.lineage_walk(project_id, root, depth, Direction::Down)
            .await
    }

    async fn lineage_walk(
        &self,
        project_id: &ProjectId,
        root: &str,
        depth: usize,
        way: Direction,
    ) -> Result<LineageGraph> {
        let sql = match way {
            Direction::Up => "SELECT parent AS other, relation FROM lineage_edges WHERE project_id = $1 AND child = $2 ORDER BY relation, parent".to_string(),
            Direction::Down => format!("SELECT child AS other, relation FROM lineage_edges WHERE project_id = $1 AND parent = $2 ORDER BY relation, child LIMIT {MAX_CHILDREN}"),
        };
        let mut edges = BTreeSet::new();
        let mut seen = BTreeSet::from([root.to_string()]);
        let mut queue = VecDeque::from([(root.to_string(), 0usize)]);
        let mut truncated = false;
        while let Some((node, level)) = queue.pop_front() {
            let rows = sqlx::query(&sql)
                .bind(project_id)
                .bind(&node)
                .fetch_all(self.meta.reader())
                .await?;
            if level >= depth {
                truncated |= !rows.is_empty();
                continue;
            }
            truncated |= matches!(way, Direction::Down) && rows.len() >= MAX_CHILDREN;
            for r in rows {
                let other: String = r.try_get("other")?;
                let (child, parent) = match way {
                    Direction::Up => (node.clone(), other.clone()),
                    Direction::Down => (other.clone(), node.clone()),
                };
                edges.insert(LineageEdge {
                    child,
                    parent,
                    relation: r.try_get("relation")?,
                });
                if seen.insert(other.clone()) {
                    queue.push_back((other, level + 1));
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
