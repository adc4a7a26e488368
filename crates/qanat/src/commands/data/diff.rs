//! `qanat data diff`: files added, removed and changed between two versions.

use anyhow::Result;
use qanat_data::wire::DiffView;

use crate::cli::Format;
use crate::output::{self, human};

pub fn print(format: Format, dataset: &str, d: &DiffView) -> Result<()> {
    if format == Format::Json {
        return output::json(d);
    }
    println!("{dataset}: version {} -> {}", d.from, d.to);
    for f in &d.diff.added {
        println!("  + {} ({})", f.path, human(f.size));
    }
    for f in &d.diff.removed {
        println!("  - {} ({})", f.path, human(f.size));
    }
    for f in &d.diff.changed {
        let what = match (f.content_changed, f.mode_changed) {
            (true, true) => "content and mode",
            (true, false) => "content",
            _ => "mode",
        };
        println!(
            "  ~ {} ({} -> {}, {} new, {what})",
            f.path,
            human(f.old_size),
            human(f.new_size),
            human(f.new_chunk_bytes)
        );
    }
    println!("  {} unchanged", d.diff.unchanged);
    for t in &d.tables {
        let mut notes = Vec::new();
        if t.rows_before != t.rows_after {
            notes.push(format!("rows {} -> {}", t.rows_before, t.rows_after));
        }
        if !t.columns_added.is_empty() {
            notes.push(format!("columns added: {}", t.columns_added.join(", ")));
        }
        if !t.columns_removed.is_empty() {
            notes.push(format!("columns removed: {}", t.columns_removed.join(", ")));
        }
        notes.extend(t.type_changes.iter().map(|c| format!("type {c}")));
        if !notes.is_empty() {
            println!("  table {}: {}", t.path, notes.join("; "));
        }
    }
    Ok(())
}
