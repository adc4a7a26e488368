//! Point-in-time ("as of") joins: for each entity row, the feature row that was known
//! at the entity row's time.
//!
//! The rule, for one entity row (keys `k`, time `t`) and one view with ttl `d`: among
//! the view's rows with keys `k` and an event time `e` with `t - d <= e <= t` (no lower
//! bound when `d` is 0), take the one with the greatest `e`; among rows with the same
//! `e`, the greatest created time (a row without one loses to a row with one); among
//! rows equal in both, the one that comes last in the input. No such row: nulls. A row
//! with a null key or a null event time never matches; an entity row with a null key
//! gets nulls.
//!
//! [`as_of`] does it by sorting both sides by (key, time) and walking them together,
//! O((n + m) log(n + m)); the tests hold it to a direct, quadratic reading of the rule
//! on random data. [`join`] applies it to Arrow batches.

use std::cmp::Ordering;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema, TimeUnit};

use crate::definitions::Ttl;
use crate::error::{Error, Result};

/// For each entity row, the index of the feature row the rule picks (None: no row).
///
/// `entity_keys[i]`/`entity_ts[i]` describe entity row `i`; `feature_keys[j]`,
/// `event_ts[j]` and `created_ts[j]` feature row `j`. `ttl_micros` 0 means unbounded.
pub fn as_of<K: Ord>(
    entity_keys: &[Option<K>],
    entity_ts: &[i64],
    feature_keys: &[Option<K>],
    event_ts: &[Option<i64>],
    created_ts: Option<&[Option<i64>]>,
    ttl_micros: i64,
) -> Vec<Option<u32>> {
    let created = |j: usize| created_ts.and_then(|c| c[j]);
    let mut features: Vec<u32> = (0..feature_keys.len())
        .filter(|&j| feature_keys[j].is_some() && event_ts[j].is_some())
        .map(|j| j as u32)
        .collect();
    // By key, then event time, then created time, then position: within a key, the
    // last row at or before a time is the one the rule picks.
    features.sort_unstable_by(|&a, &b| {
        let (a, b) = (a as usize, b as usize);
        feature_keys[a]
            .cmp(&feature_keys[b])
            .then(event_ts[a].cmp(&event_ts[b]))
            .then(created(a).cmp(&created(b)))
            .then(a.cmp(&b))
    });
    let mut entities: Vec<u32> = (0..entity_keys.len())
        .filter(|&i| entity_keys[i].is_some())
        .map(|i| i as u32)
        .collect();
    entities.sort_unstable_by(|&a, &b| {
        let (a, b) = (a as usize, b as usize);
        entity_keys[a]
            .cmp(&entity_keys[b])
            .then(entity_ts[a].cmp(&entity_ts[b]))
    });

    let mut out = vec![None; entity_keys.len()];
    let mut next = 0usize; // the first feature row not yet passed
    let mut best: Option<usize> = None; // the last passed row with an event time <= t
    for &i in &entities {
        let i = i as usize;
        let (key, t) = (&entity_keys[i], entity_ts[i]);
        while next < features.len() {
            let j = features[next] as usize;
            match feature_keys[j].cmp(key) {
                Ordering::Less => best = None,
                Ordering::Equal if event_ts[j].is_some_and(|e| e <= t) => best = Some(j),
                _ => break,
            }
            next += 1;
        }
        // `best` may belong to an earlier key when this key has no rows.
        let Some(j) = best.filter(|&j| feature_keys[j] == *key) else {
            continue;
        };
        let fresh =
            ttl_micros <= 0 || event_ts[j].is_some_and(|e| e >= t.saturating_sub(ttl_micros));
        if fresh {
            out[i] = Some(j as u32);
        }
    }
    out
}

/// [`as_of`] for the usual case of one int64 key, on flat sort records sorted on every
/// core: the same picks (a property test holds it to [`as_of`]), several times faster
/// than sorting indices through a comparison closure.
pub fn as_of_i64(
    entity_keys: &[Option<i64>],
    entity_ts: &[i64],
    feature_keys: &[Option<i64>],
    event_ts: &[Option<i64>],
    created_ts: Option<&[Option<i64>]>,
    ttl_micros: i64,
) -> Vec<Option<u32>> {
    use rayon::slice::ParallelSliceMut;
    // Signed values as unsigned ones in the same order, so records compare as plain
    // integer tuples.
    let order = |x: i64| (x as u64) ^ (1 << 63);
    // (key, event time, created time — none before any —, position): within a key the
    // last record at or before a time is the one the rule picks.
    let mut features: Vec<(u64, u64, Option<u64>, u32)> = feature_keys
        .iter()
        .zip(event_ts)
        .enumerate()
        .filter_map(|(j, (k, e))| {
            let c = created_ts.and_then(|c| c[j]).map(order);
            Some((order((*k)?), order((*e)?), c, j as u32))
        })
        .collect();
    features.par_sort_unstable();
    let mut entities: Vec<(u64, u64, u32)> = entity_keys
        .iter()
        .zip(entity_ts)
        .enumerate()
        .filter_map(|(i, (k, t))| Some((order((*k)?), order(*t), i as u32)))
        .collect();
    entities.par_sort_unstable();

    let mut out = vec![None; entity_keys.len()];
    let mut next = 0usize;
    let mut best: Option<(u64, u64, u32)> = None; // (key, event time, position)
    for &(key, t, i) in &entities {
        while let Some(&(fk, e, _, j)) = features.get(next) {
            if fk < key {
                best = None;
            } else if fk == key && e <= t {
                best = Some((fk, e, j));
            } else {
                break;
            }
            next += 1;
        }
        let Some((_, e, j)) = best.filter(|b| b.0 == key) else {
            continue;
        };
        let (e, t) = ((e ^ (1 << 63)) as i64, (t ^ (1 << 63)) as i64);
        if ttl_micros <= 0 || e >= t.saturating_sub(ttl_micros) {
            out[i as usize] = Some(j);
        }
    }
    out
}

/// One view's side of a join: its rows and which columns mean what.
pub struct ViewSide<'a> {
    pub rows: &'a RecordBatch,
    /// The view's join key columns, in the order of the entity's.
    pub keys: Vec<String>,
    pub event_timestamp: String,
    pub created_timestamp: Option<String>,
    /// The feature columns to add, with the names they take in the result.
    pub features: Vec<(String, String)>,
    pub ttl: Ttl,
}

/// Joins each view's features onto the entity rows, keeping the entity rows' order
/// and columns. `keys[v]` are the entity's columns matching view `v`'s keys, and
/// `timestamp` its time column.
pub fn join(
    entity: &RecordBatch,
    timestamp: &str,
    keys: &[Vec<String>],
    views: &[ViewSide<'_>],
) -> Result<RecordBatch> {
    let entity_ts = entity_times(entity, timestamp)?;
    let mut fields: Vec<Field> = entity
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let mut columns: Vec<ArrayRef> = entity.columns().to_vec();
    // The time column leaves as what it means, whatever it came in as (text, seconds,
    // dates): UTC microseconds.
    if let Ok(i) = entity.schema().index_of(timestamp) {
        let utc =
            arrow_array::TimestampMicrosecondArray::from(entity_ts.clone()).with_timezone("UTC");
        fields[i] = Field::new(timestamp, utc.data_type().clone(), false);
        columns[i] = std::sync::Arc::new(utc);
    }
    // Views are independent: their picks, and then every feature column's gather, run
    // on all cores.
    use rayon::prelude::*;
    let picks: Vec<UInt32Array> = views
        .par_iter()
        .enumerate()
        .map(|(v, view)| {
            let entity_keys = keys
                .get(v)
                .ok_or_else(|| Error::invalid("a view without the entity columns of its keys"))?;
            Ok(UInt32Array::from(pick(
                entity,
                entity_keys,
                &entity_ts,
                view,
            )?))
        })
        .collect::<Result<_>>()?;
    let wanted: Vec<(usize, &String, &String)> = views
        .iter()
        .enumerate()
        .flat_map(|(v, view)| view.features.iter().map(move |(c, n)| (v, c, n)))
        .collect();
    let taken: Vec<(Field, ArrayRef)> = wanted
        .par_iter()
        .map(|&(v, column, as_name)| {
            let col = column_of(views[v].rows, column, "the feature rows")?;
            let taken = arrow_select::take::take(col.as_ref(), &picks[v], None)
                .map_err(|e| Error::invalid(format!("feature {column}: {e}")))?;
            Ok((Field::new(as_name, col.data_type().clone(), true), taken))
        })
        .collect::<Result<_>>()?;
    for (f, c) in taken {
        fields.push(f);
        columns.push(c);
    }
    RecordBatch::try_new(std::sync::Arc::new(Schema::new(fields)), columns)
        .map_err(|e| Error::invalid(format!("the training set: {e}")))
}

/// The entity rows' times as UTC microseconds; every row needs one.
fn entity_times(entity: &RecordBatch, timestamp: &str) -> Result<Vec<i64>> {
    let entity_ts = micros(entity, timestamp, "the entity rows")?;
    (0..entity_ts.len())
        .map(|i| {
            if entity_ts.is_null(i) {
                Err(Error::invalid(format!(
                    "entity row {} has no timestamp in '{timestamp}': every entity row needs one",
                    i + 1
                )))
            } else {
                Ok(entity_ts.value(i))
            }
        })
        .collect()
}

/// The entity rows' time column as it leaves a join: UTC microseconds.
pub(crate) fn entity_time(entity: &RecordBatch, timestamp: &str) -> Result<ArrayRef> {
    Ok(std::sync::Arc::new(
        arrow_array::TimestampMicrosecondArray::from(entity_times(entity, timestamp)?)
            .with_timezone("UTC"),
    ))
}

/// The picked feature row of each entity row, for one view.
fn pick(
    entity: &RecordBatch,
    entity_keys: &[String],
    entity_ts: &[i64],
    view: &ViewSide<'_>,
) -> Result<Vec<Option<u32>>> {
    if entity_keys.len() != view.keys.len() || view.keys.is_empty() {
        return Err(Error::invalid(format!(
            "the entity rows name {} key column(s) for a view with {}",
            entity_keys.len(),
            view.keys.len()
        )));
    }
    let event = micros(view.rows, &view.event_timestamp, "the feature rows")?;
    let event: Vec<Option<i64>> = event.iter().collect();
    let created: Option<Vec<Option<i64>>> = match &view.created_timestamp {
        Some(c) => Some(micros(view.rows, c, "the feature rows")?.iter().collect()),
        None => None,
    };
    let ttl = i64::try_from(view.ttl.0.as_micros()).unwrap_or(i64::MAX);
    let mut e_cols = Vec::new();
    let mut f_cols = Vec::new();
    for (ek, fk) in entity_keys.iter().zip(&view.keys) {
        let (a, b) = key_pair(
            column_of(entity, ek, "the entity rows")?,
            column_of(view.rows, fk, "the feature rows")?,
            ek,
            fk,
        )?;
        e_cols.push(a);
        f_cols.push(b);
    }
    // One int64 key, the usual case, compares as integers; others as arrow-row's
    // byte-comparable rows.
    if e_cols.len() == 1 && *e_cols[0].data_type() == DataType::Int64 {
        let ek: Vec<Option<i64>> = e_cols[0].as_primitive::<Int64Type>().iter().collect();
        let fk: Vec<Option<i64>> = f_cols[0].as_primitive::<Int64Type>().iter().collect();
        return Ok(as_of_i64(
            &ek,
            entity_ts,
            &fk,
            &event,
            created.as_deref(),
            ttl,
        ));
    }
    let converter = arrow_row::RowConverter::new(
        e_cols
            .iter()
            .map(|c| arrow_row::SortField::new(c.data_type().clone()))
            .collect(),
    )
    .map_err(|e| Error::invalid(format!("join keys: {e}")))?;
    let e_rows = converter
        .convert_columns(&e_cols)
        .map_err(|e| Error::invalid(format!("join keys: {e}")))?;
    let f_rows = converter
        .convert_columns(&f_cols)
        .map_err(|e| Error::invalid(format!("join keys: {e}")))?;
    let any_null = |cols: &[ArrayRef], i: usize| cols.iter().any(|c| c.is_null(i));
    let ek: Vec<Option<arrow_row::Row<'_>>> = (0..entity.num_rows())
        .map(|i| (!any_null(&e_cols, i)).then(|| e_rows.row(i)))
        .collect();
    let fk: Vec<Option<arrow_row::Row<'_>>> = (0..view.rows.num_rows())
        .map(|i| (!any_null(&f_cols, i)).then(|| f_rows.row(i)))
        .collect();
    Ok(as_of(&ek, entity_ts, &fk, &event, created.as_deref(), ttl))
}

fn column_of<'b>(batch: &'b RecordBatch, name: &str, side: &str) -> Result<&'b ArrayRef> {
    batch.column_by_name(name).ok_or_else(|| {
        let have: Vec<String> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        Error::invalid(format!(
            "{side} have no column '{name}' (they have {})",
            have.join(", ")
        ))
    })
}

/// The type a join key is compared as: integers that fit as int64, text as utf8;
/// `None` for any other type (compared only with its own type).
pub(crate) fn key_family(t: &DataType) -> Option<DataType> {
    match t {
        DataType::UInt64 => None,
        t if t.is_integer() => Some(DataType::Int64),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some(DataType::Utf8),
        _ => None,
    }
}

/// The two sides of a join key as one comparable type: integers as int64, strings as
/// utf8; anything else must already be the same type on both sides.
fn key_pair(a: &ArrayRef, b: &ArrayRef, an: &str, bn: &str) -> Result<(ArrayRef, ArrayRef)> {
    let target = match (key_family(a.data_type()), key_family(b.data_type())) {
        (Some(x), Some(y)) if x == y => x,
        (None, None) if a.data_type() == b.data_type() => a.data_type().clone(),
        _ => {
            return Err(Error::invalid(format!(
                "join key '{an}' of the entity rows is {} but '{bn}' of the feature rows is {}: give both the key's declared type",
                a.data_type(),
                b.data_type()
            )))
        }
    };
    let cast = |c: &ArrayRef| {
        arrow_cast::cast(c.as_ref(), &target).map_err(|e| Error::invalid(format!("join key: {e}")))
    };
    Ok((cast(a)?, cast(b)?))
}

/// A time column as microseconds since the epoch (UTC): timestamps of any unit, dates,
/// or RFC 3339 text.
fn micros(
    batch: &RecordBatch,
    name: &str,
    side: &str,
) -> Result<arrow_array::PrimitiveArray<TimestampMicrosecondType>> {
    let col = column_of(batch, name, side)?;
    let ok = matches!(
        col.data_type(),
        DataType::Timestamp(_, _)
            | DataType::Date32
            | DataType::Date64
            | DataType::Utf8
            | DataType::LargeUtf8
    );
    if !ok {
        return Err(Error::invalid(format!(
            "column '{name}' of {side} is {}, not a time: use a timestamp, a date or RFC 3339 text",
            col.data_type()
        )));
    }
    let target = DataType::Timestamp(TimeUnit::Microsecond, None);
    let cast = arrow_cast::cast::cast_with_options(
        col.as_ref(),
        &target,
        &arrow_cast::cast::CastOptions {
            safe: false,
            ..Default::default()
        },
    )
    .map_err(|e| {
        Error::invalid(format!(
            "column '{name}' of {side} holds a malformed time ({e}): write e.g. 2026-01-31T12:00:00Z"
        ))
    })?;
    Ok(cast.as_primitive::<TimestampMicrosecondType>().clone())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use arrow_array::{Float64Array, Int64Array, StringArray, TimestampMicrosecondArray};
    use proptest::prelude::*;

    use super::*;

    /// The rule, read directly: every feature row considered for every entity row.
    fn reference(
        ek: &[Option<u8>],
        et: &[i64],
        fk: &[Option<u8>],
        ev: &[Option<i64>],
        cr: Option<&[Option<i64>]>,
        ttl: i64,
    ) -> Vec<Option<u32>> {
        (0..ek.len())
            .map(|i| {
                let k = ek[i]?;
                let t = et[i];
                let mut best: Option<usize> = None;
                for j in 0..fk.len() {
                    let (Some(fkey), Some(e)) = (fk[j], ev[j]) else {
                        continue;
                    };
                    if fkey != k || e > t || (ttl > 0 && e < t - ttl) {
                        continue;
                    }
                    let c = |x: usize| cr.and_then(|c| c[x]);
                    let better = match best {
                        None => true,
                        Some(b) => (ev[j], c(j), j) > (ev[b], c(b), b),
                    };
                    if better {
                        best = Some(j);
                    }
                }
                best.map(|b| b as u32)
            })
            .collect()
    }

    /// Entity rows (key, time), feature rows (key, event time, created time), a ttl,
    /// and whether the view has created times.
    type Case = (
        Vec<(Option<u8>, i64)>,
        Vec<(Option<u8>, Option<i64>, Option<i64>)>,
        i64,
        bool,
    );

    fn case() -> impl Strategy<Value = Case> {
        // Few keys and few distinct times, so that ties, duplicates and ttl edges are
        // common.
        let key = prop_oneof![9 => (0u8..5).prop_map(Some), 1 => Just(None)];
        let time = 0i64..20;
        let entity = proptest::collection::vec((key.clone(), time.clone()), 0..40);
        let feature = proptest::collection::vec(
            (
                key,
                prop_oneof![9 => time.clone().prop_map(Some), 1 => Just(None)],
                prop_oneof![3 => (0i64..4).prop_map(Some), 1 => Just(None)],
            ),
            0..60,
        );
        (entity, feature, 0i64..8, any::<bool>())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn pit_join_equals_the_reference_and_never_returns_future_rows((entity, feature, ttl, with_created) in case()) {
            let ek: Vec<Option<u8>> = entity.iter().map(|e| e.0).collect();
            let et: Vec<i64> = entity.iter().map(|e| e.1).collect();
            let fk: Vec<Option<u8>> = feature.iter().map(|f| f.0).collect();
            let ev: Vec<Option<i64>> = feature.iter().map(|f| f.1).collect();
            let cr: Vec<Option<i64>> = feature.iter().map(|f| f.2).collect();
            let cr = with_created.then_some(cr.as_slice());
            let got = as_of(&ek, &et, &fk, &ev, cr, ttl);
            prop_assert_eq!(&got, &reference(&ek, &et, &fk, &ev, cr, ttl));
            // The int64 fast path picks the same rows (times shifted below zero too, so
            // the sign handling is exercised).
            let wide = |k: &Option<u8>| k.map(|k| i64::from(k) * 1_000_003 - 2_000_000);
            let shift = |t: i64| t - 10;
            let fast = as_of_i64(
                &ek.iter().map(wide).collect::<Vec<_>>(),
                &et.iter().map(|&t| shift(t)).collect::<Vec<_>>(),
                &fk.iter().map(wide).collect::<Vec<_>>(),
                &ev.iter().map(|e| e.map(shift)).collect::<Vec<_>>(),
                cr.map(|c| c.iter().map(|x| x.map(|v| v - 2)).collect::<Vec<_>>()).as_deref(),
                ttl,
            );
            prop_assert_eq!(&fast, &got);
            for (i, g) in got.iter().enumerate() {
                if let Some(j) = g {
                    let e = ev[*j as usize].expect("a picked row has an event time");
                    prop_assert!(e <= et[i], "row {} picked a row from its future", i);
                    prop_assert_eq!(fk[*j as usize], ek[i]);
                }
            }
        }
    }

    fn ts(v: &[Option<i64>]) -> ArrayRef {
        Arc::new(TimestampMicrosecondArray::from(v.to_vec()).with_timezone("UTC"))
    }

    #[test]
    fn join_adds_each_views_features_in_entity_order_with_nulls_when_none() {
        let hour = 3_600_000_000i64;
        let entity = RecordBatch::try_from_iter([
            (
                "driver_id",
                Arc::new(Int64Array::from(vec![1, 2, 1, 3])) as ArrayRef,
            ),
            (
                "ts",
                ts(&[
                    Some(10 * hour),
                    Some(10 * hour),
                    Some(3 * hour),
                    Some(10 * hour),
                ]),
            ),
        ])
        .expect("entity");
        let rows = RecordBatch::try_from_iter([
            (
                "driver_id",
                Arc::new(Int64Array::from(vec![1, 1, 2, 1])) as ArrayRef,
            ),
            (
                "event_timestamp",
                ts(&[Some(9 * hour), Some(2 * hour), Some(hour), Some(11 * hour)]),
            ),
            (
                "conv_rate",
                Arc::new(Float64Array::from(vec![0.9, 0.2, 0.5, 0.99])) as ArrayRef,
            ),
        ])
        .expect("rows");
        let view = ViewSide {
            rows: &rows,
            keys: vec!["driver_id".into()],
            event_timestamp: "event_timestamp".into(),
            created_timestamp: None,
            features: vec![("conv_rate".into(), "driver_stats__conv_rate".into())],
            ttl: Ttl(Duration::from_secs(4 * 3600)),
        };
        let out = join(&entity, "ts", &[vec!["driver_id".into()]], &[view]).expect("join");
        let got = out
            .column_by_name("driver_stats__conv_rate")
            .expect("column")
            .as_primitive::<arrow_array::types::Float64Type>()
            .iter()
            .collect::<Vec<_>>();
        // Driver 2's only row is 9 h old, past the 4 h ttl; driver 3 has none; the row
        // at 11 h is in the future of every entity row.
        assert_eq!(got, vec![Some(0.9), None, Some(0.2), None]);
        assert_eq!(out.num_columns(), 3);
    }

    #[test]
    fn string_and_composite_keys_join_and_mismatched_types_are_refused() {
        let entity = RecordBatch::try_from_iter([
            (
                "card",
                Arc::new(StringArray::from(vec![Some("a"), None, Some("b")])) as ArrayRef,
            ),
            (
                "merchant",
                Arc::new(Int64Array::from(vec![1, 1, 2])) as ArrayRef,
            ),
            (
                "ts",
                Arc::new(StringArray::from(vec!["2026-01-02T00:00:00Z"; 3])) as ArrayRef,
            ),
        ])
        .expect("entity");
        let rows = RecordBatch::try_from_iter([
            (
                "card",
                Arc::new(StringArray::from(vec!["a", "b", "b"])) as ArrayRef,
            ),
            (
                "merchant",
                Arc::new(arrow_array::Int32Array::from(vec![1, 1, 2])) as ArrayRef,
            ),
            (
                "at",
                Arc::new(StringArray::from(vec!["2026-01-01T00:00:00Z"; 3])) as ArrayRef,
            ),
            (
                "amount",
                Arc::new(Float64Array::from(vec![1.0, 2.0, 3.0])) as ArrayRef,
            ),
        ])
        .expect("rows");
        let side = |keys: Vec<&str>| ViewSide {
            rows: &rows,
            keys: keys.into_iter().map(String::from).collect(),
            event_timestamp: "at".into(),
            created_timestamp: None,
            features: vec![("amount".into(), "amount".into())],
            ttl: Ttl::default(),
        };
        let keys = vec![vec!["card".to_string(), "merchant".to_string()]];
        let out = join(&entity, "ts", &keys, &[side(vec!["card", "merchant"])]).expect("join");
        let got: Vec<Option<f64>> = out
            .column_by_name("amount")
            .expect("amount")
            .as_primitive::<arrow_array::types::Float64Type>()
            .iter()
            .collect();
        assert_eq!(got, vec![Some(1.0), None, Some(3.0)]);

        let wrong = vec![vec!["merchant".to_string(), "card".to_string()]];
        let e = join(&entity, "ts", &wrong, &[side(vec!["card", "merchant"])]).expect_err("types");
        assert!(e.to_string().contains("join key 'merchant'"), "{e}");
    }

    #[test]
    fn malformed_times_and_missing_columns_are_named() {
        let entity = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            (
                "ts",
                Arc::new(StringArray::from(vec!["yesterday"])) as ArrayRef,
            ),
        ])
        .expect("entity");
        let rows = RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
            ("at", ts(&[Some(0)])),
        ])
        .expect("rows");
        let view = |feature: &str| ViewSide {
            rows: &rows,
            keys: vec!["id".into()],
            event_timestamp: "at".into(),
            created_timestamp: None,
            features: vec![(feature.into(), feature.into())],
            ttl: Ttl::default(),
        };
        let e = join(&entity, "ts", &[vec!["id".into()]], &[view("at")]).expect_err("bad time");
        assert!(e.to_string().contains("malformed time"), "{e}");
        let e = join(&entity, "when", &[vec!["id".into()]], &[view("at")]).expect_err("no column");
        assert!(e.to_string().contains("no column 'when'"), "{e}");
    }
}
