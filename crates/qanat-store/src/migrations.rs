//! Migrations are owned by the domain crates; the store applies them.
//!
//! Each domain crate ships `migrations/{sqlite,postgres}/NNNN_what.sql` and exports
//! them as one [`DomainMigrations`] static, embedded at build time by
//! [`domain_migrations!`](crate::domain_migrations), which names the files (one list for
//! both dialects). The binary lists the domains in a [`Schema`], and
//! [`MetaStore::connect`](crate::MetaStore::connect) applies it: every migration of
//! every listed domain, in ascending version order, each once (sqlx records what ran,
//! with a checksum of the file's text, in `_sqlx_migrations`).
//!
//! The files are named and read the way `sqlx::migrate!` reads a folder (the version
//! before the first `_`, the rest with `_` as spaces for the description, a file that
//! starts with `-- no-transaction` runs outside a transaction, the checksum a SHA-384
//! of the text), so databases migrated by either agree; the macro is not used because
//! it builds sqlx's drivers, and SQLite's C, a second time for the build machine.
//!
//! Invariants, checked when a schema is built:
//! - a file is named `<version>_<description>.sql`;
//! - a version number belongs to one migration of one domain (numbers are global:
//!   a new migration takes the next free number, whichever domain it belongs to);
//! - domains are listed in the order they came into being: each one's first migration
//!   has a higher number than the first migration of every domain before it, so a
//!   domain's tables are created after those of the domains it may refer to, and the
//!   list reads as the history of the schema. A new domain goes at the end of the list
//!   and its first migration takes the next free number;
//! - both dialects of a domain have the same versions, so SQLite and PostgreSQL
//!   databases always have the same shape (the macro reads both from one list).
//!
//! [`DomainMigrations::unlisted`] finds a file in the folders that the list forgot (the
//! binary's tests check every domain).
//!
//! A migration that has shipped is never edited: its checksum is recorded in every
//! database it ran on, and a changed file stops those databases from opening.

use std::borrow::Cow;
use std::collections::BTreeMap;

use sqlx::migrate::{Migration, MigrationType, Migrator};

use crate::{Backend, Error, Result};

/// One migration file, embedded: its name (`0002_datasets.sql`) and its text.
#[derive(Debug, Clone, Copy)]
pub struct Embedded {
    pub file: &'static str,
    pub sql: &'static str,
}

impl Embedded {
    /// The migration sqlx runs, read from the file's name and text as `sqlx::migrate!`
    /// reads them.
    fn migration(&self, domain: &str) -> Result<Migration> {
        let bad = || {
            Error::invalid(
                "schema",
                format!(
                    "migration '{}' of domain '{domain}' is not named <version>_<description>.sql",
                    self.file
                ),
            )
        };
        let (version, rest) = self.file.split_once('_').ok_or_else(bad)?;
        let version: i64 = version.parse().map_err(|_| bad())?;
        let description = rest.strip_suffix(".sql").ok_or_else(bad)?.replace('_', " ");
        Ok(Migration::new(
            version,
            Cow::Owned(description),
            MigrationType::Simple,
            Cow::Borrowed(self.sql),
            self.sql.starts_with("-- no-transaction"),
        ))
    }
}

/// One domain's migrations, in both dialects.
#[derive(Debug)]
pub struct DomainMigrations {
    /// The domain's name, for error messages (`governance`, `datasets`, …).
    pub domain: &'static str,
    /// The crate's folder at build time (holding `migrations/`), for
    /// [`unlisted`](Self::unlisted).
    pub source: &'static str,
    pub sqlite: &'static [Embedded],
    pub postgres: &'static [Embedded],
}

/// A domain crate's migrations, the named files of its `migrations/sqlite` and
/// `migrations/postgres` folders (embedded at build time; a new migration is a new file
/// in both folders and its name here):
/// `pub static MIGRATIONS: DomainMigrations = qanat_store::domain_migrations!("datasets", ["0002_datasets.sql"]);`
#[macro_export]
macro_rules! domain_migrations {
    ($domain:literal, [$($file:literal),* $(,)?]) => {
        $crate::migrations::DomainMigrations {
            domain: $domain,
            source: ::core::env!("CARGO_MANIFEST_DIR"),
            sqlite: &[$($crate::migrations::Embedded {
                file: $file,
                sql: ::core::include_str!(::core::concat!(
                    ::core::env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite/", $file
                )),
            }),*],
            postgres: &[$($crate::migrations::Embedded {
                file: $file,
                sql: ::core::include_str!(::core::concat!(
                    ::core::env!("CARGO_MANIFEST_DIR"), "/migrations/postgres/", $file
                )),
            }),*],
        }
    };
}

impl DomainMigrations {
    fn of(&self, backend: Backend) -> Result<Vec<Migration>> {
        let files = match backend {
            Backend::Sqlite => self.sqlite,
            Backend::Postgres => self.postgres,
        };
        files.iter().map(|f| f.migration(self.domain)).collect()
    }

    /// The `.sql` files in the crate's migration folders that the domain's list does not
    /// name (`sqlite/0009_x.sql`), when the folders are there to read (a test on the
    /// build machine); empty when every file is listed.
    pub fn unlisted(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (dialect, listed) in [("sqlite", self.sqlite), ("postgres", self.postgres)] {
            let dir = std::path::Path::new(self.source)
                .join("migrations")
                .join(dialect);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(".sql") && !listed.iter().any(|f| f.file == name) {
                    out.push(format!("{dialect}/{name}"));
                }
            }
        }
        out.sort();
        out
    }
}

/// The domains whose tables a metadata store holds, checked for clashing versions.
#[derive(Debug, Clone)]
pub struct Schema {
    /// Every listed domain's migrations, by version, with the owning domain.
    sqlite: Vec<(Migration, &'static str)>,
    postgres: Vec<(Migration, &'static str)>,
}

impl Schema {
    /// A schema of `domains`, listed in the order of their first migrations (a domain
    /// whose tables refer to another's comes after it).
    ///
    /// ```
    /// # fn main() -> Result<(), qanat_store::Error> {
    /// use qanat_store::migrations::{DomainMigrations, Schema};
    ///
    /// static NONE: DomainMigrations = DomainMigrations {
    ///     domain: "empty",
    ///     source: "",
    ///     sqlite: &[],
    ///     postgres: &[],
    /// };
    /// assert!(Schema::new(&[&NONE])?.versions().is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(domains: &[&'static DomainMigrations]) -> Result<Schema> {
        let mut owner: BTreeMap<i64, &str> = BTreeMap::new();
        let mut newest_first: Option<(i64, &str)> = None;
        let mut schema = Schema {
            sqlite: Vec::new(),
            postgres: Vec::new(),
        };
        for d in domains {
            let sqlite_migrations = d.of(Backend::Sqlite)?;
            let postgres_migrations = d.of(Backend::Postgres)?;
            let sqlite: Vec<i64> = sqlite_migrations.iter().map(|m| m.version).collect();
            let postgres: Vec<i64> = postgres_migrations.iter().map(|m| m.version).collect();
            if sqlite != postgres {
                return Err(Error::invalid(
                    "schema",
                    format!(
                        "domain '{}' has SQLite migrations {sqlite:?} but PostgreSQL migrations {postgres:?}; give both dialects the same versions",
                        d.domain
                    ),
                ));
            }
            if let Some(first) = sqlite.iter().copied().min() {
                if let Some((earlier, by)) = newest_first.filter(|(v, _)| first < *v) {
                    return Err(Error::invalid(
                        "schema",
                        format!(
                            "domain '{}' (first migration {first}) is listed after '{by}' (first migration {earlier}); list domains in the order of their first migrations",
                            d.domain
                        ),
                    ));
                }
                newest_first = Some((first, d.domain));
            }
            for v in sqlite {
                if let Some(other) = owner.insert(v, d.domain) {
                    return Err(Error::invalid(
                        "schema",
                        format!(
                            "migration version {v} is claimed by both '{other}' and '{}'; give the newer one the next free number",
                            d.domain
                        ),
                    ));
                }
            }
            schema
                .sqlite
                .extend(sqlite_migrations.into_iter().map(|m| (m, d.domain)));
            schema
                .postgres
                .extend(postgres_migrations.into_iter().map(|m| (m, d.domain)));
        }
        schema.sqlite.sort_by_key(|(m, _)| m.version);
        schema.postgres.sort_by_key(|(m, _)| m.version);
        Ok(schema)
    }

    /// The versions and the domain that owns each, in the order they apply.
    pub fn versions(&self) -> Vec<(i64, &'static str)> {
        self.sqlite.iter().map(|(m, d)| (m.version, *d)).collect()
    }

    /// One migrator over every domain's migrations for `backend`, by version.
    pub(crate) fn migrator(&self, backend: Backend) -> Migrator {
        let all = match backend {
            Backend::Sqlite => &self.sqlite,
            Backend::Postgres => &self.postgres,
        };
        Migrator {
            migrations: Cow::Owned(all.iter().map(|(m, _)| m.clone()).collect()),
            ..Migrator::DEFAULT
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(versions: &[i64]) -> &'static [Embedded] {
        versions
            .iter()
            .map(|&v| Embedded {
                file: Box::leak(format!("{v:04}_m{v}.sql").into_boxed_str()),
                sql: Box::leak(format!("CREATE TABLE t{v} (x INTEGER)").into_boxed_str()),
            })
            .collect::<Vec<_>>()
            .leak()
    }

    fn domain(name: &'static str, sqlite: &[i64], postgres: &[i64]) -> &'static DomainMigrations {
        Box::leak(Box::new(DomainMigrations {
            domain: name,
            source: "",
            sqlite: files(sqlite),
            postgres: files(postgres),
        }))
    }

    #[test]
    fn a_version_claimed_by_two_domains_is_refused() {
        let err = Schema::new(&[domain("a", &[1, 2], &[1, 2]), domain("b", &[2], &[2])])
            .expect_err("clash");
        let msg = err.to_string();
        assert!(
            msg.contains("version 2") && msg.contains("'a'") && msg.contains("'b'"),
            "{msg}"
        );
    }

    #[test]
    fn both_dialects_need_the_same_versions() {
        let err = Schema::new(&[domain("a", &[1, 2], &[1])]).expect_err("dialects");
        assert!(
            err.to_string().contains("PostgreSQL migrations [1]"),
            "{err}"
        );
    }

    #[test]
    fn a_domain_listed_before_an_older_one_is_refused() {
        let err = Schema::new(&[domain("b", &[2], &[2]), domain("a", &[1, 3], &[1, 3])])
            .expect_err("order");
        let msg = err.to_string();
        assert!(
            msg.contains("'a' (first migration 1) is listed after 'b' (first migration 2)"),
            "{msg}"
        );
    }

    #[test]
    fn a_domain_without_migrations_fits_anywhere() {
        let s = Schema::new(&[
            domain("a", &[1], &[1]),
            domain("none", &[], &[]),
            domain("b", &[2], &[2]),
        ])
        .expect("schema");
        assert_eq!(s.versions(), [(1, "a"), (2, "b")]);
    }

    #[test]
    fn migrations_apply_by_version_whichever_domain_owns_them() {
        // A later migration of an earlier domain (3) runs after the other domain's 2.
        let s =
            Schema::new(&[domain("a", &[1, 3], &[1, 3]), domain("b", &[2], &[2])]).expect("schema");
        assert_eq!(s.versions(), [(1, "a"), (2, "b"), (3, "a")]);
        let m = s.migrator(Backend::Sqlite);
        let order: Vec<i64> = m.iter().map(|m| m.version).collect();
        assert_eq!(order, [1, 2, 3]);
    }

    #[test]
    fn files_are_read_as_sqlx_reads_a_folder() {
        let text = "-- no-transaction\nCREATE INDEX CONCURRENTLY i ON t (x);\n";
        let m = Embedded {
            file: "0012_add_an_index.sql",
            sql: text,
        }
        .migration("d")
        .expect("named well");
        assert_eq!(m.version, 12);
        assert_eq!(m.description, "add an index");
        assert!(m.no_tx);
        let sha384 = ring::digest::digest(&ring::digest::SHA384, text.as_bytes());
        assert_eq!(&*m.checksum, sha384.as_ref());
        for bad in ["twelve_x.sql", "0012.sql", "0012_x.txt"] {
            let err = Embedded { file: bad, sql: "" }
                .migration("d")
                .expect_err(bad);
            assert!(err.to_string().contains(bad), "{err}");
        }
    }
}
