//! Human tables by default, JSON with `--output json`.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde_json::Value;

use crate::cli::Format;

pub(super) fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// Prints a list: a table of `columns` (header, JSON field), or the JSON itself.
pub(crate) fn list(format: Format, items: &Value, columns: &[(&str, &str)]) {
    if format == Format::Json {
        println!(
            "{}",
            serde_json::to_string_pretty(items).unwrap_or_default()
        );
        return;
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(columns.iter().map(|(h, _)| *h));
    for item in items.as_array().map(Vec::as_slice).unwrap_or_default() {
        t.add_row(columns.iter().map(|(_, k)| cell(&item[*k])));
    }
    println!("{t}");
}

/// Prints typed `items` as a table under `header`, one row of cells per item, or as
/// JSON with `--output json`.
pub(crate) fn table<T: serde::Serialize>(
    format: Format,
    items: &[T],
    header: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) {
    if format == Format::Json {
        println!(
            "{}",
            serde_json::to_string_pretty(items).unwrap_or_default()
        );
        return;
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(header.iter().copied());
    for item in items {
        t.add_row(row(item));
    }
    println!("{t}");
}

/// A cell for an optional value: `-` when absent.
pub(crate) fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".into(), T::to_string)
}

/// Prints one object as field/value rows, or the JSON itself.
pub(crate) fn object(format: Format, item: &Value) {
    if format == Format::Json {
        println!("{}", serde_json::to_string_pretty(item).unwrap_or_default());
        return;
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    if let Some(map) = item.as_object() {
        for (k, v) in map {
            t.add_row(vec![k.clone(), cell(v)]);
        }
    }
    println!("{t}");
}
