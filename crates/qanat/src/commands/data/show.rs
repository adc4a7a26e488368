//! `qanat data show`: a dataset, or one version with its files and the profiles of its
//! tables.

use anyhow::Result;
use qanat_core::ObjectRef;
use qanat_data::tabular::ColumnProfile;
use qanat_data::wire::VersionWithManifest;
use qanat_data::FileEntry;

use crate::cli::Format;
use crate::commands::Ctx;
use crate::output::{self, Row};

pub async fn show(ctx: &Ctx, project: &str, reference: &ObjectRef) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    let Some(selector) = &reference.selector else {
        return output::record(format, &c.dataset(project, &reference.name).await?);
    };
    let v = c.version(project, &reference.name, selector).await?;
    if format == Format::Json {
        return output::json(&v);
    }
    print_version(&v);
    Ok(())
}

fn print_version(v: &VersionWithManifest) {
    let version = &v.version;
    println!(
        "version {} of {} ({}, {}): {}",
        version.version,
        version.dataset,
        output::count(version.file_count, "file"),
        output::human(u64::try_from(version.total_size).unwrap_or_default()),
        version.message
    );
    for p in &v.profiles {
        match (&p.profile, &p.error) {
            (Some(profile), _) => {
                println!("{} ({}, {} rows):", p.path, profile.format, profile.rows);
                let mut t = output::table(ColumnProfile::HEADERS);
                for col in &profile.columns {
                    t.add_row(col.cells());
                }
                output::print(t);
            }
            (None, error) => println!(
                "{}: not profiled ({})",
                p.path,
                error.as_deref().unwrap_or("no reason given")
            ),
        }
    }
    let mut t = output::table(FileEntry::HEADERS);
    for f in &v.manifest.files {
        t.add_row(f.cells());
    }
    output::print(t);
    if !version.undeclared_pii.is_empty() {
        println!(
            "undeclared personal data (declare it: qanat data declare-pii {} COLUMN...):",
            version.dataset
        );
        for u in &version.undeclared_pii {
            println!("  {}", u.describe());
        }
    }
    for p in &v.pseudonymized {
        println!(
            "pseudonymized for you (no PII permission): {} [{}]",
            p.path,
            p.columns.join(", ")
        );
    }
}

/// A statistic with at most four decimals, trailing zeros dropped.
fn stat(v: f64) -> String {
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

output::columns!(ColumnProfile, |x| {
    "column" => x.name.clone(),
    "type" => x.data_type.clone(),
    "nulls" => stat(x.null_fraction),
    "min" => output::opt(x.min.as_ref()),
    "max" => output::opt(x.max.as_ref()),
    "mean" => output::opt(x.mean.map(stat)),
    "std" => output::opt(x.std.map(stat)),
    "distinct" => x.distinct_estimate.to_string(),
    "pii" => pii(&x.pii),
});

/// The kinds of personal data a column likely holds, with the share of values that
/// matched: `email 100%`, `person_name (name)`.
fn pii(found: &[qanat_core::pii::PiiFinding]) -> String {
    if found.is_empty() {
        return "-".into();
    }
    found
        .iter()
        .map(|f| {
            if f.matched > 0 {
                format!("{} {}%", f.kind, (f.share * 100.0).round())
            } else {
                format!("{} (name)", f.kind)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

output::columns!(FileEntry, |x| {
    "path" => x.path.clone(),
    "size" => x.size.to_string(),
    "blake3" => x.blake3.clone(),
});

#[cfg(test)]
mod tests {
    use super::stat;

    #[test]
    fn statistics_are_short() {
        assert_eq!(stat(0.0), "0");
        assert_eq!(stat(0.25), "0.25");
        assert_eq!(stat(10.0 / 3.0), "3.3333");
        assert_eq!(stat(-0.00001), "0");
        assert_eq!(stat(1500.0), "1500");
    }
}
