//! Human tables by default, JSON with `--output json`. Commands print the domain types
//! through [`list`] and [`record`]; a type says how it looks as a table row ([`Row`]) or
//! as field/value lines ([`Record`]) in the command group that shows it.

use std::fmt::Display;

use anyhow::Result;
use std::sync::atomic::{AtomicBool, Ordering};

use comfy_table::{
    presets::UTF8_FULL_CONDENSED, ColumnConstraint, ContentArrangement, Table, Width,
};
use serde::Serialize;

use crate::cli::Format;

/// A type listed one per table row.
pub trait Row {
    /// The column headers, in the order of [`Row::cells`].
    const HEADERS: &'static [&'static str];
    fn cells(&self) -> Vec<String>;
}

/// A type shown alone, as field/value lines.
pub trait Record {
    fn fields(&self) -> Vec<(&'static str, String)>;
}

/// Implements [`Row`] from one list of `"header" => cell` pairs, so a column's header
/// and its cell are written side by side: `columns!(Member, |m| { "user" => m.user.clone(), })`.
macro_rules! columns {
    ($ty:ty, |$it:ident| { $($header:literal => $cell:expr,)+ }) => {
        impl $crate::output::Row for $ty {
            const HEADERS: &'static [&'static str] = &[$($header),+];
            fn cells(&self) -> Vec<String> {
                let $it = self;
                vec![$($cell),+]
            }
        }
    };
}

/// Implements [`Record`] from one list of `"field" => value` pairs, or as the type's
/// [`Row`] read down instead of across (`fields!(Member = Row)`).
macro_rules! fields {
    ($ty:ty = Row) => {
        impl $crate::output::Record for $ty {
            fn fields(&self) -> Vec<(&'static str, String)> {
                use $crate::output::Row;
                Self::HEADERS.iter().copied().zip(self.cells()).collect()
            }
        }
    };
    // The row's columns between fields of the record's own.
    ($ty:ty, |$it:ident| { $($before:literal => $b:expr,)* } + Row + { $($after:literal => $a:expr,)* }) => {
        impl $crate::output::Record for $ty {
            fn fields(&self) -> Vec<(&'static str, String)> {
                use $crate::output::Row;
                let $it = self;
                let mut out = vec![$(($before, $b)),*];
                out.extend(Self::HEADERS.iter().copied().zip(self.cells()));
                out.extend([$(($after, $a)),*]);
                out
            }
        }
    };
    ($ty:ty, |$it:ident| { $($field:literal => $value:expr,)+ }) => {
        impl $crate::output::Record for $ty {
            fn fields(&self) -> Vec<(&'static str, String)> {
                let $it = self;
                vec![$(($field, $value)),+]
            }
        }
    };
}

pub(crate) use {columns, fields};

/// Prints `v` as indented JSON.
pub fn json<T: Serialize + ?Sized>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// How wide a table is printed on a terminal unless `COLUMNS` says otherwise or
/// `-o wide` asks for every cell in full.
pub const WIDTH: u16 = 100;

static WIDE: AtomicBool = AtomicBool::new(false);

/// `-o wide`: tables print every cell in full (set once, from the command line).
pub fn set_wide(wide: bool) {
    WIDE.store(wide, Ordering::Relaxed);
}

/// The width tables are fitted to: `COLUMNS` when set, else [`WIDTH`] on a terminal;
/// none with `-o wide` or when stdout is a pipe or a file (scripts and `grep` get
/// whole rows).
pub fn width() -> Option<u16> {
    use std::io::IsTerminal;
    if WIDE.load(Ordering::Relaxed) {
        return None;
    }
    match std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok())
    {
        Some(c) if c >= 40 => Some(c),
        _ if std::io::stdout().is_terminal() => Some(WIDTH),
        _ => None,
    }
}

/// A table with our style, for commands whose columns depend on the data.
pub fn table<H: Display>(headers: impl IntoIterator<Item = H>) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(headers.into_iter().map(|h| h.to_string()));
    t
}

/// Cells at most this wide are never cut: ids (32 hex digits, a UUID), times,
/// numbers, names. Only longer free text (messages, sources, metric lists) is.
const WHOLE: u16 = 36;

/// The fewest characters a long column is cut to.
const SHORTEST: u16 = 16;

/// Prints a list table fitted to [`width`], each row one line with long text cut (`…`). Columns of short cells (ids, times) stay whole, so what a
/// table shows can be copied into the next command.
pub fn print(mut t: Table) {
    if let Some(limit) = width() {
        let widths = t.column_max_content_widths();
        // Each shown column costs its cells and 3 characters of border; the table 1 more.
        let fixed: u16 = widths.iter().filter(|w| **w <= WHOLE).map(|w| w + 3).sum();
        let room = i32::from(limit) - 1 - i32::from(fixed);
        // Long columns get at least SHORTEST characters; those that cannot, rightmost
        // first, are left out (`-o wide` shows them).
        let mut shown: Vec<bool> = widths.iter().map(|_| true).collect();
        let need = |w: u16| i32::from(w.min(SHORTEST)) + 3;
        let mut wanted: i32 = widths
            .iter()
            .filter(|w| **w > WHOLE)
            .map(|w| need(*w))
            .sum();
        for (i, w) in widths.iter().enumerate().rev() {
            if wanted <= room {
                break;
            }
            if *w > WHOLE {
                shown[i] = false;
                wanted -= need(*w);
            }
        }
        for ((column, width), shown) in t.column_iter_mut().zip(widths).zip(shown) {
            column.set_constraint(if !shown {
                ColumnConstraint::Hidden
            } else if width <= WHOLE {
                ColumnConstraint::ContentWidth
            } else {
                ColumnConstraint::LowerBoundary(Width::Fixed(width.min(SHORTEST)))
            });
        }
        t.set_content_arrangement(ContentArrangement::Dynamic)
            .set_width(limit)
            .set_truncation_indicator("…");
        for row in t.row_iter_mut() {
            row.max_height(1);
        }
    }
    println!("{t}");
}

/// Prints a table of field/value lines fitted to [`width`], long values wrapped.
pub fn print_record(mut t: Table) {
    if let Some(limit) = width() {
        t.set_content_arrangement(ContentArrangement::Dynamic)
            .set_width(limit);
    }
    println!("{t}");
}

/// Prints a list: a table of its rows, or the JSON array.
pub fn list<T: Row + Serialize>(format: Format, items: &[T]) -> Result<()> {
    if format == Format::Json {
        return json(items);
    }
    let mut t = table(T::HEADERS);
    for item in items {
        t.add_row(item.cells());
    }
    print(t);
    Ok(())
}

/// Prints one item: its field/value lines, or the JSON object.
pub fn record<T: Record + Serialize>(format: Format, item: &T) -> Result<()> {
    if format == Format::Json {
        return json(item);
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    for (field, value) in item.fields() {
        t.add_row(vec![field.to_string(), value]);
    }
    print_record(t);
    Ok(())
}

/// A value, or `-` when there is none.
pub fn opt<T: Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Items joined with commas (`-` for none).
pub fn joined<T: Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "-".into();
    }
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `1 file`, `2 files`.
pub fn count(n: impl Into<i64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Bytes in binary units: `512 B`, `1.5 KiB`, `3.2 GiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A byte progress bar with throughput, on stderr (drawn only on a terminal).
pub fn progress(total: u64, verb: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    let style = indicatif::ProgressStyle::with_template(&format!(
        "{verb} [{{bar:30}}] {{bytes}}/{{total_bytes}} {{bytes_per_sec}} {{msg}}"
    ))
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar
}

/// Epoch milliseconds (MLflow's times) as `YYYY-MM-DD HH:MM:SS` UTC, `-` for none.
pub fn millis(ms: Option<i64>) -> String {
    ms.and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || "-".to_string(),
            |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(5 << 30), "5.0 GiB");
    }

    #[test]
    fn missing_values_show_as_a_dash() {
        assert_eq!(opt(None::<i64>), "-");
        assert_eq!(joined::<String>(&[]), "-");
        assert_eq!(joined(&["a", "b"]), "a,b");
        assert_eq!(millis(None), "-");
        assert_eq!(millis(Some(0)), "1970-01-01 00:00:00");
        assert_eq!(count(1, "file"), "1 file");
        assert_eq!(count(0, "file"), "0 files");
    }
}
