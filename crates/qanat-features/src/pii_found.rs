//! Personal data found in feature views' values as they pass through the feature
//! store: the rows a materialization reads, the rows pushed or streamed in, and the
//! columns of the training sets built from the views. Whatever the source (a dataset,
//! project files, SQL, pushes, a stream), its values are looked at where they are
//! read anyway, so no extra read of a source is made to scan it.
//!
//! The kinds found are kept per view and feature (`feature_pii_found`), as a union
//! over everything seen: a feature that held an email address once is reported until
//! it is marked `pii: true` (then it is protected) or the view is re-applied without
//! it. Features found are protected as if marked (pseudonymized online and in
//! training sets for callers without the PII permission); the compliance report and
//! `features plan` flag them until the repo marks them.

use std::collections::{BTreeMap, BTreeSet};

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::RecordBatch;
use arrow_schema::DataType;
use qanat_core::pii::ColumnScan;
use qanat_governance::Project;
use serde_json::Value;
use sqlx::Row;

use crate::error::Result;
use crate::Features;

/// Kinds found, by feature.
pub type Found = BTreeMap<String, Vec<String>>;

/// Values of a number type below this are not identifiers (as in dataset profiles).
const SMALLEST_ID: i64 = 1_000_000;

/// Rows of one push (or stream batch) looked at: the first rows show what a column
/// holds, and a push's cost stays bounded.
const PUSH_ROWS: usize = 1_000;

/// A scan of some features' values.
pub(crate) struct Scan {
    columns: Vec<(String, ColumnScan)>,
}

impl Scan {
    /// A scan of `features` (each read from the column of the same name).
    pub(crate) fn new<'a>(features: impl IntoIterator<Item = &'a str>) -> Self {
        Scan {
            columns: features
                .into_iter()
                .map(|f| (f.to_string(), ColumnScan::new(f)))
                .collect(),
        }
    }

    /// Looks at a batch's values of the scanned features (strings, and whole numbers
    /// large enough to be identifiers), while each wants more.
    pub(crate) fn add_batch(&mut self, batch: &RecordBatch) {
        for (name, scan) in &mut self.columns {
            if !scan.wants_more() {
                continue;
            }
            let Some(array) = batch.column_by_name(name) else {
                continue;
            };
            match array.data_type() {
                DataType::Utf8 => {
                    for v in array.as_string::<i32>().iter().flatten() {
                        scan.add_sampled(v);
                    }
                }
                DataType::LargeUtf8 => {
                    for v in array.as_string::<i64>().iter().flatten() {
                        scan.add_sampled(v);
                    }
                }
                DataType::Utf8View => {
                    for v in array.as_string_view().iter().flatten() {
                        scan.add_sampled(v);
                    }
                }
                DataType::Int64 => {
                    for v in array.as_primitive::<Int64Type>().iter().flatten() {
                        if v >= SMALLEST_ID && scan.wants_more() {
                            scan.add_sampled(&v.to_string());
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Looks at one JSON value of `feature` (a pushed cell).
    pub(crate) fn add_value(&mut self, feature: &str, value: &Value) {
        let Some((_, scan)) = self.columns.iter_mut().find(|(n, _)| n == feature) else {
            return;
        };
        match value {
            Value::String(s) => scan.add_sampled(s),
            Value::Number(n) => {
                if let Some(i) = n.as_i64().filter(|i| *i >= SMALLEST_ID) {
                    scan.add_sampled(&i.to_string());
                }
            }
            _ => {}
        }
    }

    /// The kinds found with medium or high confidence, by feature (features without
    /// any left out).
    pub(crate) fn found(&self) -> Found {
        self.columns
            .iter()
            .filter_map(|(name, scan)| {
                let kinds = qanat_types::data::tabular::confirmed_kinds(&scan.findings());
                (!kinds.is_empty()).then(|| (name.clone(), kinds))
            })
            .collect()
    }
}

impl Features {
    /// Records what a scan of `view`'s values found (`by`: what read them), adding
    /// to what was found before. Writes only when something new was found.
    pub(crate) async fn record_pii_found(
        &self,
        project: &Project,
        view: &str,
        by: &str,
        found: &Found,
    ) -> Result<()> {
        if found.is_empty() {
            return Ok(());
        }
        let key = (project.id.clone(), view.to_string());
        let new: Vec<(&String, &Vec<String>)> = {
            let seen = self.pii_seen.lock().unwrap_or_else(|e| e.into_inner());
            let known = seen.get(&key);
            found
                .iter()
                .filter(|(f, kinds)| {
                    let had = known.and_then(|k| k.get(*f));
                    kinds.iter().any(|k| !had.is_some_and(|h| h.contains(k)))
                })
                .collect()
        };
        if new.is_empty() {
            return Ok(());
        }
        let now = qanat_store::now_micros();
        let mut tx = self.meta.writer().begin().await?;
        let mut merged: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (feature, kinds) in new {
            let old: Option<String> = sqlx::query_scalar(
                "SELECT kinds FROM feature_pii_found WHERE project_id = $1 AND view = $2 AND feature = $3",
            )
            .bind(project.id.as_str())
            .bind(view)
            .bind(feature)
            .fetch_optional(&mut *tx)
            .await?;
            let mut all: BTreeSet<String> = old
                .as_deref()
                .unwrap_or_default()
                .split(',')
                .filter(|k| !k.is_empty())
                .map(str::to_string)
                .collect();
            all.extend(kinds.iter().cloned());
            let list = all.iter().cloned().collect::<Vec<_>>().join(",");
            sqlx::query(
                "INSERT INTO feature_pii_found (project_id, view, feature, kinds, found_by, found_at) VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (project_id, view, feature) DO UPDATE SET kinds = excluded.kinds, found_by = excluded.found_by, found_at = excluded.found_at",
            )
            .bind(project.id.as_str())
            .bind(view)
            .bind(feature)
            .bind(&list)
            .bind(by)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            merged.insert(feature.clone(), all);
        }
        tx.commit().await?;
        // Reads protect what was found from now on.
        crate::registry_changed();
        tracing::info!(project = %project.name, view, found_by = by, ?merged, "personal data found in a feature view's values");
        let mut seen = self.pii_seen.lock().unwrap_or_else(|e| e.into_inner());
        let known = seen.entry(key).or_default();
        for (f, kinds) in merged {
            known.entry(f).or_default().extend(kinds);
        }
        Ok(())
    }

    /// Marks the features of `view` whose values were found to hold personal data as
    /// `pii`, so that they are protected as declared ones are (pseudonymized online
    /// and in training sets for callers without the PII permission) until the repo
    /// marks them itself.
    pub(crate) async fn protect_found(
        &self,
        project: &Project,
        view: &str,
        def: &mut crate::definitions::FeatureViewDef,
    ) -> Result<()> {
        if def.schema.iter().all(|f| f.pii) {
            return Ok(());
        }
        let found: Vec<String> = sqlx::query_scalar(
            "SELECT feature FROM feature_pii_found WHERE project_id = $1 AND view = $2",
        )
        .bind(project.id.as_str())
        .bind(view)
        .fetch_all(self.meta.reader())
        .await?;
        for f in &mut def.schema {
            if found.iter().any(|n| n == f.name.as_str()) {
                f.pii = true;
            }
        }
        Ok(())
    }

    /// What scans of the project's views' values found so far: kinds by feature, by
    /// view.
    pub async fn pii_found(&self, project: &Project) -> Result<BTreeMap<String, Found>> {
        let rows = sqlx::query(
            "SELECT view, feature, kinds FROM feature_pii_found WHERE project_id = $1 ORDER BY view, feature",
        )
        .bind(project.id.as_str())
        .fetch_all(self.meta.reader())
        .await?;
        let mut out: BTreeMap<String, Found> = BTreeMap::new();
        for r in rows {
            let view: String = r.try_get("view")?;
            let feature: String = r.try_get("feature")?;
            let kinds: String = r.try_get("kinds")?;
            out.entry(view).or_default().insert(
                feature,
                kinds
                    .split(',')
                    .filter(|k| !k.is_empty())
                    .map(str::to_string)
                    .collect(),
            );
        }
        Ok(out)
    }

    /// Scans the first rows of a push (or stream batch) for each view it feeds, and
    /// records what is found.
    pub(crate) async fn scan_pushed(
        &self,
        project: &Project,
        views: &[crate::serving::LiveView],
        df: &crate::wire::Columns,
        by: &str,
    ) -> Result<()> {
        for v in views {
            let mut scan = Scan::new(v.def.schema.iter().map(|f| f.name.as_str()));
            for f in &v.def.schema {
                if let Some((_, values)) = df.0.iter().find(|c| c.0 == f.name.as_str()) {
                    for value in values.iter().take(PUSH_ROWS) {
                        scan.add_value(f.name.as_str(), value);
                    }
                }
            }
            self.record_pii_found(project, &v.name, by, &scan.found())
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{Field, Schema};

    use super::*;

    /// An Emirates ID with its check digit made right.
    fn emirates_id(body: &str) -> i64 {
        (0..10)
            .map(|d| format!("{body}{d}"))
            .find(|id| qanat_core::pii::is_emirates_id(id))
            .expect("one check digit is right")
            .parse()
            .expect("digits")
    }

    #[test]
    fn a_scan_finds_identifiers_in_strings_and_in_numbers() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("contact", DataType::Utf8, true),
            Field::new("national_no", DataType::Int64, true),
            Field::new("trips", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![
                    Some("a.b@example.ae"),
                    Some("c@example.com"),
                    None,
                ])),
                Arc::new(Int64Array::from(vec![
                    emirates_id("78419901234567"),
                    emirates_id("78419857654321"),
                    emirates_id("78420011112222"),
                ])),
                Arc::new(Int64Array::from(vec![3, 12, 40])),
            ],
        )
        .expect("batch");
        let mut scan = Scan::new(["contact", "national_no", "trips"]);
        scan.add_batch(&batch);
        let found = scan.found();
        assert_eq!(found.get("contact"), Some(&vec!["email".to_string()]));
        assert_eq!(
            found.get("national_no"),
            Some(&vec!["emirates_id".to_string()])
        );
        assert!(!found.contains_key("trips"), "{found:?}");
    }

    #[test]
    fn pushed_cells_are_scanned_by_feature() {
        let mut scan = Scan::new(["phone", "score"]);
        for v in ["+971 50 123 4567", "+971501234568", "0501234569"] {
            scan.add_value("phone", &Value::from(v));
        }
        scan.add_value("score", &Value::from(0.5));
        scan.add_value("unknown", &Value::from("x@example.com"));
        let found = scan.found();
        assert_eq!(found.get("phone"), Some(&vec!["phone".to_string()]));
        assert_eq!(found.len(), 1, "{found:?}");
    }
}
