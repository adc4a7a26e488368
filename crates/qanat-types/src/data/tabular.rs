//! What a dataset's tables look like: the profile stored with each file of a version
//! (columns, types, nulls, quantiles, top values) and the schema a dataset may declare,
//! checked against those profiles (`qanat-data` computes the profiles).

use std::collections::BTreeMap;

use qanat_core::Refusal;
use serde::{Deserialize, Serialize};

pub use qanat_core::TableFormat;

/// Example rows kept per violation.
const EXAMPLES: usize = 5;

/// A value frequency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Category {
    pub value: String,
    pub count: u64,
}

/// One column's statistics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ColumnProfile {
    pub name: String,
    /// The Arrow type, e.g. `Int64`, `Float64`, `Utf8`, `Boolean`.
    pub data_type: String,
    pub nulls: u64,
    pub null_fraction: f64,
    /// Numeric columns: the smallest and largest value; strings: lexicographic.
    pub min: Option<String>,
    pub max: Option<String>,
    pub mean: Option<f64>,
    pub std: Option<f64>,
    /// p01, p05, p25, p50, p75, p95, p99 (numeric columns; from a 10k-value reservoir).
    pub quantiles: Option<BTreeMap<String, f64>>,
    /// HyperLogLog estimate (about 1.6% error).
    pub distinct_estimate: u64,
    /// Most frequent values (strings and booleans).
    pub top: Vec<Category>,
    /// Row numbers (0-based, data rows) of the first nulls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub null_rows: Vec<u64>,
    /// Personal data the column likely holds, by its values (the first
    /// `qanat_core::pii::SCAN_LIMIT` non-null ones) and its name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub pii: Vec<qanat_core::pii::PiiFinding>,
}

/// A tabular file's schema and profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TableProfile {
    #[schema(schema_with = table_format_schema)]
    pub format: TableFormat,
    pub rows: u64,
    pub columns: Vec<ColumnProfile>,
}

/// A column a dataset declares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ColumnSpec {
    pub name: String,
    /// Arrow type name: Int64, Float64, Utf8, Boolean, Date32, Timestamp, …
    #[serde(rename = "type")]
    pub data_type: String,
    #[serde(default = "yes")]
    pub nullable: bool,
    /// Personal data: reads of it are governed (see docs/datasets.md).
    #[serde(default)]
    pub pii: bool,
}

fn yes() -> bool {
    true
}

/// Personal data found in a column that its dataset does not declare.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UndeclaredPii {
    pub file: String,
    pub column: String,
    /// What it likely holds, surest first (`email`, `phone`, …).
    pub kinds: Vec<String>,
    /// The surest finding's share of values matched (0 when found by name alone).
    pub share: f64,
}

impl UndeclaredPii {
    /// `customers.csv: email (email, 100%)`.
    pub fn describe(&self) -> String {
        let share = if self.share > 0.0 {
            format!(", {:.0}% of values", self.share * 100.0)
        } else {
            " by its name".to_string()
        };
        format!(
            "{}: column '{}' ({}{share})",
            self.file,
            self.column,
            self.kinds.join(", ")
        )
    }
}

/// Whether a finding makes its column personal data: by its values (medium or high
/// confidence), or by name with values of the kind's shape. A name alone (low) is
/// shown in the profile but protects nothing.
pub fn confirmed(f: &qanat_core::pii::PiiFinding) -> bool {
    f.confidence >= qanat_core::pii::Confidence::Medium
}

/// The kinds confirmed among a column's findings, surest first.
pub fn confirmed_kinds(found: &[qanat_core::pii::PiiFinding]) -> Vec<String> {
    let mut f: Vec<&qanat_core::pii::PiiFinding> = found.iter().filter(|f| confirmed(f)).collect();
    f.sort_by(|a, b| {
        b.confidence
            .cmp(&a.confidence)
            .then(b.share.total_cmp(&a.share))
    });
    f.iter().map(|f| f.kind.to_string()).collect()
}

/// The columns a dataset declares as personal data: its schema's `pii: true` ones and
/// its `pii_columns`.
pub fn declared_pii(schema: Option<&DatasetSchema>, pii_columns: &[String]) -> Vec<String> {
    let mut out: Vec<String> = schema
        .map(|s| {
            s.columns
                .iter()
                .filter(|c| c.pii)
                .map(|c| c.name.clone())
                .collect()
        })
        .unwrap_or_default();
    for c in pii_columns {
        if !out.contains(c) {
            out.push(c.clone());
        }
    }
    out
}

/// The columns of one table to protect: the declared ones it has, and those whose
/// profile confirms personal data.
pub fn protected_columns(profile: &TableProfile, declared: &[String]) -> Vec<String> {
    profile
        .columns
        .iter()
        .filter(|c| declared.contains(&c.name) || c.pii.iter().any(confirmed))
        .map(|c| c.name.clone())
        .collect()
}

/// Confirmed personal data in columns that are not declared.
pub fn undeclared_pii(profiles: &[FileProfile], declared: &[String]) -> Vec<UndeclaredPii> {
    let mut out = Vec::new();
    for fp in profiles {
        let Some(p) = &fp.profile else { continue };
        for c in &p.columns {
            if declared.contains(&c.name) {
                continue;
            }
            let mut found: Vec<&qanat_core::pii::PiiFinding> =
                c.pii.iter().filter(|f| confirmed(f)).collect();
            if found.is_empty() {
                continue;
            }
            found.sort_by(|a, b| {
                b.confidence
                    .cmp(&a.confidence)
                    .then(b.share.total_cmp(&a.share))
            });
            out.push(UndeclaredPii {
                file: fp.path.clone(),
                column: c.name.clone(),
                kinds: found.iter().map(|f| f.kind.to_string()).collect(),
                share: found[0].share,
            });
        }
    }
    out
}

/// A profile with the values of `columns` hidden (min, max, top values, quantiles):
/// what a reader without the PII permission sees.
pub fn redact_profile(profile: &mut TableProfile, columns: &[String]) {
    for c in profile
        .columns
        .iter_mut()
        .filter(|c| columns.contains(&c.name))
    {
        c.min = None;
        c.max = None;
        c.top.clear();
        c.quantiles = None;
        c.mean = None;
        c.std = None;
    }
}

/// The schema every tabular file of a dataset must follow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DatasetSchema {
    pub columns: Vec<ColumnSpec>,
}

/// A tabular file of a version and its profile (or why it could not be profiled).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FileProfile {
    pub path: String,
    pub profile: Option<TableProfile>,
    pub error: Option<String>,
}

/// One way a file breaks the declared schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SchemaViolation {
    pub file: String,
    pub column: String,
    pub problem: String,
    /// Example rows (0-based data row numbers) or values.
    pub examples: Vec<String>,
}

impl DatasetSchema {
    /// Checks the schema itself: names unique and non-empty, types known.
    pub fn validate(&self) -> Result<(), Refusal> {
        let mut seen = std::collections::HashSet::new();
        if self.columns.is_empty() {
            return Err(Refusal::invalid("schema", "declare at least one column"));
        }
        for c in &self.columns {
            if c.name.is_empty() || !seen.insert(c.name.as_str()) {
                return Err(Refusal::invalid(
                    "schema",
                    format!("column name '{}' is empty or repeated", c.name),
                ));
            }
            if family(&c.data_type).is_none() {
                return Err(Refusal::invalid(
                    "schema",
                    format!(
                        "column '{}': unknown type '{}'; use Int64, Float64, Utf8, Boolean, Date32 or Timestamp",
                        c.name, c.data_type
                    ),
                ));
            }
        }
        Ok(())
    }

    /// What is wrong with `profile` (of `file`) against this schema.
    pub fn check(&self, file: &str, profile: &TableProfile) -> Vec<SchemaViolation> {
        let mut out = Vec::new();
        let v = |column: &str, problem: String, examples: Vec<String>| SchemaViolation {
            file: file.to_string(),
            column: column.to_string(),
            problem,
            examples,
        };
        for spec in &self.columns {
            match profile.columns.iter().find(|c| c.name == spec.name) {
                None => out.push(v(&spec.name, "declared column is missing".into(), vec![])),
                Some(col) => {
                    if !compatible(&col.data_type, &spec.data_type) {
                        out.push(v(
                            &spec.name,
                            format!(
                                "values are {} but the schema says {}",
                                col.data_type, spec.data_type
                            ),
                            col.top
                                .iter()
                                .take(EXAMPLES)
                                .map(|c| c.value.clone())
                                .chain(col.min.clone())
                                .take(EXAMPLES)
                                .collect(),
                        ));
                    }
                    if !spec.nullable && col.nulls > 0 {
                        out.push(v(
                            &spec.name,
                            format!(
                                "{} null value(s) in a column declared not nullable",
                                col.nulls
                            ),
                            col.null_rows.iter().map(|r| format!("row {r}")).collect(),
                        ));
                    }
                }
            }
        }
        for col in &profile.columns {
            if !self.columns.iter().any(|s| s.name == col.name) {
                out.push(v(
                    &col.name,
                    format!("column ({}) is not in the declared schema", col.data_type),
                    vec![],
                ));
            }
        }
        out
    }
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Family {
    Int,
    Float,
    Text,
    Bool,
    Date,
    Time,
}

fn family(t: &str) -> Option<Family> {
    let t = t.to_ascii_lowercase();
    Some(match t.as_str() {
        "int8" | "int16" | "int32" | "int64" | "uint8" | "uint16" | "uint32" | "uint64" => {
            Family::Int
        }
        "float16" | "float32" | "float64" => Family::Float,
        "utf8" | "largeutf8" | "utf8view" | "string" => Family::Text,
        "boolean" | "bool" => Family::Bool,
        "date32" | "date64" => Family::Date,
        _ if t.starts_with("timestamp") => Family::Time,
        _ => return None,
    })
}

/// Whether values inferred as `found` fit a column declared `declared`.
fn compatible(found: &str, declared: &str) -> bool {
    match (family(found), family(declared)) {
        (Some(f), Some(d)) if f == d => true,
        (Some(Family::Int), Some(Family::Float)) => true,
        (Some(_), Some(Family::Text)) => true,
        // A column with only nulls is inferred as Utf8/Null: it fits anything.
        (None, _) => found.eq_ignore_ascii_case("null"),
        _ => false,
    }
}

/// [`TableFormat`]'s schema: one of its words (the type lives in `qanat-core`, which
/// has no schema derive).
fn table_format_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(["csv", "parquet"]))
        .description(Some("Which tabular format a file is, by extension."))
        .build()
}
