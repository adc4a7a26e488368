//! What the tracking store shows, from `qanat_types::tracking::model`, and how a search
//! picks lifecycle stages.

pub use qanat_types::tracking::model::*;

/// Which lifecycle stages a search returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ViewType {
    #[default]
    ActiveOnly,
    DeletedOnly,
    All,
}

impl ViewType {
    /// From MLflow's enum name (or its number).
    pub fn parse(s: &str) -> Option<ViewType> {
        match s {
            "ACTIVE_ONLY" | "1" => Some(ViewType::ActiveOnly),
            "DELETED_ONLY" | "2" => Some(ViewType::DeletedOnly),
            "ALL" | "3" => Some(ViewType::All),
            _ => None,
        }
    }

    pub(crate) fn stages(self) -> &'static [&'static str] {
        match self {
            ViewType::ActiveOnly => &["active"],
            ViewType::DeletedOnly => &["deleted"],
            ViewType::All => &["active", "deleted"],
        }
    }
}
