//! Migrations are owned by the domain crates; the store applies them.
//!
//! Each domain crate ships `migrations/{sqlite,postgres}/NNNN_what.sql` and exports
//! them as one [`DomainMigrations`] static (built with `sqlx::migrate!`). The binary
//! lists the domains in a [`Schema`], and [`MetaStore::connect`](crate::MetaStore::connect)
//! applies it: every migration of every listed domain, in ascending version order, each
//! once (sqlx records what ran, with a checksum, in `_sqlx_migrations`).
//!
//! Invariants, checked when a schema is built:
//! - a version number belongs to one migration of one domain (numbers are global:
//!   a new migration takes the next free number, whichever domain it belongs to);
//! - domains are listed in the order they came into being: each one's first migration
//!   has a higher number than the first migration of every domain before it, so a
//!   domain's tables are created after those of the domains it may refer to, and the
//!   list reads as the history of the schema. A new domain goes at the end of the list
//!   and its first migration takes the next free number;
//! - both dialects of a domain have the same versions, so SQLite and PostgreSQL
//!   databases always have the same shape.
//!
//! A migration that has shipped is never edited: its checksum is recorded in every
//! database it ran on, and a changed file stops those databases from opening.

use std::borrow::Cow;
use std::collections::BTreeMap;

use sqlx::migrate::{Migration, Migrator};

use crate::{Backend, Error, Result};

/// One domain's migrations, in both dialects.
#[derive(Debug)]
pub struct DomainMigrations {
    /// The domain's name, for error messages (`governance`, `datasets`, …).
    pub domain: &'static str,
    pub sqlite: Migrator,
    pub postgres: Migrator,
}

/// A domain crate's migrations, from its `migrations/sqlite` and
/// `migrations/postgres` folders (embedded at build time):
/// `pub static MIGRATIONS: DomainMigrations = qanat_store::domain_migrations!("datasets");`
#[macro_export]
macro_rules! domain_migrations {
    ($domain:literal) => {
        $crate::migrations::DomainMigrations {
            domain: $domain,
            sqlite: ::sqlx::migrate!("./migrations/sqlite"),
            postgres: ::sqlx::migrate!("./migrations/postgres"),
        }
    };
}

impl DomainMigrations {
    fn of(&self, backend: Backend) -> &Migrator {
        match backend {
            Backend::Sqlite => &self.sqlite,
            Backend::Postgres => &self.postgres,
        }
    }
}

/// The domains whose tables a metadata store holds, checked for clashing versions.
#[derive(Debug, Clone)]
pub struct Schema {
    domains: Vec<&'static DomainMigrations>,
}

impl Schema {
    /// A schema of `domains`, listed in the order of their first migrations (a domain
    /// whose tables refer to another's comes after it).
    ///
    /// ```
    /// # fn main() -> Result<(), qanat_store::Error> {
    /// use qanat_store::migrations::{DomainMigrations, Schema};
    /// use sqlx::migrate::Migrator;
    ///
    /// static NONE: DomainMigrations = DomainMigrations {
    ///     domain: "empty",
    ///     sqlite: Migrator::DEFAULT,
    ///     postgres: Migrator::DEFAULT,
    /// };
    /// assert!(Schema::new(&[&NONE])?.versions().is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(domains: &[&'static DomainMigrations]) -> Result<Schema> {
        let mut owner: BTreeMap<i64, &str> = BTreeMap::new();
        let mut newest_first: Option<(i64, &str)> = None;
        for d in domains {
            let sqlite: Vec<i64> = d.sqlite.iter().map(|m| m.version).collect();
            let postgres: Vec<i64> = d.postgres.iter().map(|m| m.version).collect();
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
        }
        Ok(Schema {
            domains: domains.to_vec(),
        })
    }

    /// The versions and the domain that owns each, in the order they apply.
    pub fn versions(&self) -> Vec<(i64, &'static str)> {
        let mut out: Vec<(i64, &'static str)> = self
            .domains
            .iter()
            .flat_map(|d| d.sqlite.iter().map(|m| (m.version, d.domain)))
            .collect();
        out.sort_unstable();
        out
    }

    /// One migrator over every domain's migrations for `backend`, by version.
    pub(crate) fn migrator(&self, backend: Backend) -> Migrator {
        let mut all: Vec<Migration> = self
            .domains
            .iter()
            .flat_map(|d| d.of(backend).iter().cloned())
            .collect();
        all.sort_by_key(|m| m.version);
        Migrator {
            migrations: Cow::Owned(all),
            ..Migrator::DEFAULT
        }
    }
}

#[cfg(test)]
mod tests {
    use sqlx::migrate::MigrationType;

    use super::*;

    fn migrator(versions: &[i64]) -> Migrator {
        Migrator {
            migrations: Cow::Owned(
                versions
                    .iter()
                    .map(|&v| {
                        Migration::new(
                            v,
                            Cow::Owned(format!("m{v}")),
                            MigrationType::Simple,
                            Cow::Owned(format!("CREATE TABLE t{v} (x INTEGER)")),
                            false,
                        )
                    })
                    .collect(),
            ),
            ..Migrator::DEFAULT
        }
    }

    fn domain(name: &'static str, sqlite: &[i64], postgres: &[i64]) -> &'static DomainMigrations {
        Box::leak(Box::new(DomainMigrations {
            domain: name,
            sqlite: migrator(sqlite),
            postgres: migrator(postgres),
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
}
