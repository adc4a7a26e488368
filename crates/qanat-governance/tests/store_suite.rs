//! The shared store suite: every test runs against SQLite, and against PostgreSQL when
//! `QANAT_TEST_POSTGRES_URL` is set (CI sets it).

use qanat_core::Refusal;
use qanat_governance::wire::AuditFilter;
use qanat_governance::{AuditOutcome, AuditRecord, Error, Governance, Role, UserKind};
use qanat_store::now_micros;
use qanat_store::testing::TestDb;

fn record(i: usize, outcome: AuditOutcome) -> AuditRecord {
    AuditRecord {
        request_id: format!("req-{i}"),
        actor: "alice".into(),
        action: "object.write".into(),
        resource: format!("project:p/object:{i}"),
        project: Some("p".into()),
        outcome,
        detail: "200".into(),
    }
}

async fn exec(db: &TestDb, statement: &str) {
    sqlx::query(statement)
        .execute(db.store.writer())
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
}

/// Swaps the sequence numbers of entries `a` and `b` (moves two entries).
async fn swap(db: &TestDb, a: i64, b: i64) {
    exec(
        db,
        &format!("UPDATE audit_log SET seq = -1 WHERE seq = {a}"),
    )
    .await;
    exec(
        db,
        &format!("UPDATE audit_log SET seq = {a} WHERE seq = {b}"),
    )
    .await;
    exec(
        db,
        &format!("UPDATE audit_log SET seq = {b} WHERE seq = -1"),
    )
    .await;
}

#[tokio::test]
async fn tokens_authenticate_until_revoked_or_expired() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let gov = Governance::new(db.store.clone());
        let boot = gov
            .bootstrap_admin("admin")
            .await
            .expect("bootstrap")
            .expect("first time");
        assert!(
            gov.bootstrap_admin("admin").await.expect("again").is_none(),
            "printed once"
        );
        let admin = gov
            .authenticate(&boot.token)
            .await
            .expect("bootstrap token works");
        assert!(admin.is_admin);

        gov.create_user("bot", UserKind::Service, false)
            .await
            .expect("create");
        let t = gov.create_token("bot", "ci", None).await.expect("token");
        assert_eq!(t.token.len(), 4 + 43, "qnt_ + 256 bits in base64url");
        let p = gov.authenticate(&t.token).await.expect("valid");
        assert_eq!(p.name, "bot");
        assert_eq!(p.kind, UserKind::Service);

        // The secret is not stored anywhere in the tokens table.
        let rows: Vec<(String,)> = sqlx::query_as("SELECT secret_hash FROM tokens")
            .fetch_all(db.store.reader())
            .await
            .expect("read");
        assert!(rows.iter().all(|(h,)| !h.contains(&t.token[4..])));

        gov.revoke_token(&t.info.id).await.expect("revoke");
        assert!(
            matches!(gov.authenticate(&t.token).await, Err(Error::Unauthenticated(m)) if m.contains("revoked"))
        );

        let short = gov
            .create_token("bot", "short", Some(now_micros() + 200_000))
            .await
            .expect("token");
        gov.authenticate(&short.token).await.expect("valid for now");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(
            matches!(gov.authenticate(&short.token).await, Err(Error::Unauthenticated(m)) if m.contains("expired"))
        );

        let other = gov.create_token("bot", "other", None).await.expect("token");
        gov.update_user("bot", None, Some(true))
            .await
            .expect("disable");
        assert!(
            matches!(gov.authenticate(&other.token).await, Err(Error::Unauthenticated(m)) if m.contains("disabled"))
        );

        assert!(matches!(
            gov.authenticate("qnt_nope").await,
            Err(Error::Unauthenticated(_))
        ));
        assert!(matches!(
            gov.authenticate("Bearer x").await,
            Err(Error::Unauthenticated(_))
        ));
    }
}

#[tokio::test]
async fn projects_members_and_roles() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let gov = Governance::new(db.store.clone());
        let admin = qanat_governance::testing::admin(&gov).await;
        let p = gov
            .create_project("fraud", "fraud models", &["uae-north".into()], &admin)
            .await
            .expect("create");
        assert_eq!(p.allowed_regions, vec!["uae-north"]);
        assert!(matches!(
            gov.create_project("fraud", "", &["uae-north".into()], &admin)
                .await,
            Err(Error::Refused(Refusal::AlreadyExists { .. }))
        ));
        assert!(matches!(
            gov.create_project("Bad Name", "", &["uae-north".into()], &admin)
                .await,
            Err(Error::Refused(Refusal::Invalid { .. }))
        ));
        assert!(matches!(
            gov.create_project("x", "", &[], &admin).await,
            Err(Error::Refused(Refusal::Invalid { .. }))
        ));

        let viewer = gov
            .create_user("vera", UserKind::User, false)
            .await
            .expect("user");
        assert_eq!(gov.role_in(&viewer.id, "fraud").await.expect("role"), None);
        gov.set_member(&p, "vera", Role::Viewer, &admin, None)
            .await
            .expect("grant");
        assert_eq!(
            gov.role_in(&viewer.id, "fraud").await.expect("role"),
            Some(Role::Viewer)
        );
        gov.set_member(&p, "vera", Role::Editor, &admin, None)
            .await
            .expect("regrant");
        assert_eq!(
            gov.role_in(&viewer.id, "fraud").await.expect("role"),
            Some(Role::Editor)
        );
        assert!(matches!(
            gov.role_in(&viewer.id, "nope").await,
            Err(Error::Refused(Refusal::NotFound { .. }))
        ));

        let vera_token = gov.create_token("vera", "t", None).await.expect("token");
        let vera = gov.authenticate(&vera_token.token).await.expect("auth");
        assert_eq!(gov.projects_for(&vera).await.expect("list").len(), 1);
        gov.remove_member(&p, "vera", &admin, None)
            .await
            .expect("remove");
        assert!(gov.projects_for(&vera).await.expect("list").is_empty());

        let updated = gov
            .update_project(
                &p,
                &qanat_governance::wire::UpdateProject {
                    allowed_regions: Some(vec!["uae-north".into(), "uae-south".into()]),
                    ..Default::default()
                },
            )
            .await
            .expect("update");
        assert_eq!(updated.allowed_regions.len(), 2);
        assert_eq!(updated.description, "fraud models");
    }
}

#[tokio::test]
async fn audit_chain_detects_changed_deleted_and_reordered_entries() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let gov = Governance::new(db.store.clone());
        for i in 0..10 {
            gov.append_audit(&record(i, AuditOutcome::Success))
                .await
                .expect("append");
        }
        let v = gov.verify_audit().await.expect("verify");
        assert!(v.ok, "{v:?}");
        assert_eq!(v.entries_checked, 10);

        // Changed.
        exec(&db, "UPDATE audit_log SET actor = 'mallory' WHERE seq = 4").await;
        let v = gov.verify_audit().await.expect("verify");
        assert!(!v.ok);
        assert!(
            v.problems.iter().any(|p| p.seq == 4 && p.kind == "changed"),
            "{v:?}"
        );
        exec(&db, "UPDATE audit_log SET actor = 'alice' WHERE seq = 4").await;
        assert!(gov.verify_audit().await.expect("verify").ok);

        // Reordered: swap the contents of entries 6 and 7.
        swap(&db, 6, 7).await;
        let v = gov.verify_audit().await.expect("verify");
        assert!(!v.ok);
        assert!(v.problems.iter().any(|p| p.seq == 6), "{v:?}");

        swap(&db, 6, 7).await;
        assert!(gov.verify_audit().await.expect("verify").ok);

        // Deleted in the middle.
        exec(&db, "DELETE FROM audit_log WHERE seq = 5").await;
        let v = gov.verify_audit().await.expect("verify");
        assert!(
            v.problems.iter().any(|p| p.seq == 5 && p.kind == "missing"),
            "{v:?}"
        );

        // Deleted at the end.
        exec(&db, "DELETE FROM audit_log WHERE seq = 10").await;
        let v = gov.verify_audit().await.expect("verify");
        assert!(
            v.problems
                .iter()
                .any(|p| p.seq == 10 && p.kind == "truncated"),
            "{v:?}"
        );
    }
}

#[tokio::test]
async fn concurrent_appends_form_one_dense_chain() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let gov = Governance::new(db.store.clone());
        let mut tasks = Vec::new();
        for t in 0..16 {
            let gov = gov.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..25 {
                    gov.append_audit(&record(t * 100 + i, AuditOutcome::Denied))
                        .await
                        .expect("concurrent append must not fail (no 'database is locked')");
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        let v = gov.verify_audit().await.expect("verify");
        assert!(v.ok, "{v:?}");
        assert_eq!(v.entries_checked, 400);
        assert_eq!(v.head_seq, 400);

        let q = gov
            .query_audit(&AuditFilter {
                outcome: Some("denied".into()),
                limit: Some(5),
                ..Default::default()
            })
            .await
            .expect("query");
        assert_eq!(
            q.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![396, 397, 398, 399, 400]
        );
        let after = gov
            .query_audit(&AuditFilter {
                after_seq: Some(10),
                limit: Some(3),
                ..Default::default()
            })
            .await
            .expect("query");
        assert_eq!(
            after.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![11, 12, 13]
        );
    }
}

/// Group-committed appends (`append_audit`) and appends inside a caller's transaction
/// (`append_audit_in`) interleave into one valid chain, and what each append returns is
/// exactly what was stored.
#[tokio::test]
async fn batched_and_in_transaction_appends_share_one_chain() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let gov = Governance::new(db.store.clone());
        let mut tasks = Vec::new();
        for t in 0..12 {
            let (gov, store) = (gov.clone(), db.store.clone());
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                for i in 0..20 {
                    let rec = record(t * 100 + i, AuditOutcome::Success);
                    let entry = if t % 3 == 0 {
                        let mut tx = store.writer().begin().await.expect("begin");
                        let e = qanat_governance::append_audit_in(&mut tx, &rec)
                            .await
                            .expect("append in tx");
                        tx.commit().await.expect("commit");
                        e
                    } else {
                        gov.append_audit(&rec).await.expect("append")
                    };
                    assert_eq!(entry.request_id, rec.request_id);
                    got.push(entry);
                }
                got
            }));
        }
        let mut returned = Vec::new();
        for t in tasks {
            returned.extend(t.await.expect("task"));
        }
        let v = gov.verify_audit().await.expect("verify");
        assert!(v.ok, "{v:?}");
        assert_eq!((v.entries_checked, v.head_seq), (240, 240));
        let stored = gov
            .query_audit(&AuditFilter {
                limit: Some(1000),
                ..Default::default()
            })
            .await
            .expect("query");
        returned.sort_by_key(|e| e.seq);
        let key = |e: &qanat_governance::AuditEntry| {
            (
                e.seq,
                e.request_id.clone(),
                e.hash.clone(),
                e.prev_hash.clone(),
            )
        };
        assert_eq!(
            returned.iter().map(key).collect::<Vec<_>>(),
            stored.iter().map(key).collect::<Vec<_>>()
        );
    }
}

/// The database keeps the chain whole by itself: an entry that does not follow the head
/// (a reused sequence number, a skipped one, a wrong link) is refused and nothing of its
/// statement is stored; a group commit whose remembered head went stale (another
/// appender moved it) still lands after the real head.
#[tokio::test]
async fn the_database_refuses_entries_that_do_not_follow_the_head() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let gov = Governance::new(db.store.clone());
        for i in 0..3 {
            gov.append_audit(&record(i, AuditOutcome::Success))
                .await
                .expect("append");
        }
        let head: (i64, String) = sqlx::query_as("SELECT seq, hash FROM audit_head WHERE id = 1")
            .fetch_one(db.store.reader())
            .await
            .expect("head");
        assert_eq!(head.0, 3);
        let forge = |seq: i64, prev: &str| {
            format!(
                "INSERT INTO audit_log (seq, ts, request_id, actor, action, resource, project, outcome, detail, prev_hash, hash) \
                 VALUES ({seq}, 1, 'x', 'mallory', 'a', 'r', NULL, 'success', '', '{prev}', 'f')"
            )
        };
        for (seq, prev) in [(3, head.1.as_str()), (5, head.1.as_str()), (4, "0000")] {
            let err = sqlx::query(&forge(seq, prev))
                .execute(db.store.writer())
                .await
                .expect_err("a forged entry is refused");
            assert!(err.to_string().contains("audit chain head moved"), "{err}");
        }
        // A two-row insert whose second row breaks the chain stores neither.
        let two = format!(
            "{}, (6, 1, 'y', 'mallory', 'a', 'r', NULL, 'success', '', 'f', 'g')",
            forge(4, &head.1)
        );
        sqlx::query(&two)
            .execute(db.store.writer())
            .await
            .expect_err("the second row is refused");
        let count: (i64,) = sqlx::query_as("SELECT COUNT(*) FROM audit_log")
            .fetch_one(db.store.reader())
            .await
            .expect("count");
        assert_eq!(count.0, 3, "nothing of a refused statement is stored");

        // Another appender moves the head; the group commit's next batch follows it.
        let mut tx = db.store.writer().begin().await.expect("begin");
        qanat_governance::append_audit_in(&mut tx, &record(10, AuditOutcome::Success))
            .await
            .expect("append in tx");
        tx.commit().await.expect("commit");
        let e = gov
            .append_audit(&record(11, AuditOutcome::Success))
            .await
            .expect("append after the head moved");
        assert_eq!(e.seq, 5);
        let v = gov.verify_audit().await.expect("verify");
        assert!(v.ok, "{v:?}");
        assert_eq!((v.entries_checked, v.head_seq), (5, 5));
    }
}

/// The principal of a fresh token of `user`.
async fn as_user(gov: &Governance, user: &str) -> qanat_governance::Principal {
    let token = gov.create_token(user, "t", None).await.expect("token");
    gov.authenticate(&token.token).await.expect("auth")
}

#[tokio::test]
async fn members_cannot_outrank_themselves_and_a_project_keeps_an_admin() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let gov = Governance::new(db.store.clone());
        let root = qanat_governance::testing::admin(&gov).await;
        let p = gov
            .create_project("p", "", &["uae-north".into()], &root)
            .await
            .expect("project");
        for (name, role) in [
            ("ann", Role::Admin),
            ("max", Role::Maintainer),
            ("ed", Role::Editor),
        ] {
            gov.create_user(name, UserKind::User, false)
                .await
                .expect("user");
            gov.set_member(&p, name, role, &root, None)
                .await
                .expect("grant");
        }
        let max = as_user(&gov, "max").await;
        let by_max = Some(Role::Maintainer);
        let forbidden = |r: qanat_governance::Result<_>, what: &str| match r {
            Err(Error::Forbidden(m)) => m,
            other => panic!("{what}: expected a refusal, got {other:?}"),
        };

        // A maintainer can neither demote nor remove an admin, nor make anyone admin.
        let m = forbidden(
            gov.set_member(&p, "ann", Role::Viewer, &max, by_max)
                .await
                .map(|_| ()),
            "demote an admin",
        );
        assert!(m.contains("above your role"), "{m}");
        forbidden(
            gov.remove_member(&p, "ann", &max, by_max).await,
            "remove an admin",
        );
        let m = forbidden(
            gov.set_member(&p, "ed", Role::Admin, &max, by_max)
                .await
                .map(|_| ()),
            "grant admin",
        );
        assert!(m.contains("up to maintainer"), "{m}");
        // ... but manages the members at or below their own rank.
        gov.set_member(&p, "ed", Role::Maintainer, &max, by_max)
            .await
            .expect("promote to own rank");
        gov.set_member(&p, "ed", Role::Viewer, &max, by_max)
            .await
            .expect("demote");
        gov.remove_member(&p, "ed", &max, by_max)
            .await
            .expect("remove");
        let roles: Vec<_> = gov
            .members(&p)
            .await
            .expect("members")
            .into_iter()
            .map(|m| (m.user, m.role))
            .collect();
        assert_eq!(
            roles,
            vec![
                ("admin".to_string(), Role::Admin),
                ("ann".to_string(), Role::Admin),
                ("max".to_string(), Role::Maintainer),
            ]
        );

        // The project keeps an admin, whoever asks.
        gov.set_member(&p, "admin", Role::Viewer, &root, None)
            .await
            .expect("demote one of two admins");
        let ann = as_user(&gov, "ann").await;
        let m = forbidden(
            gov.set_member(&p, "ann", Role::Maintainer, &ann, Some(Role::Admin))
                .await
                .map(|_| ()),
            "demote the last admin",
        );
        assert!(m.contains("last admin"), "{m}");
        forbidden(
            gov.remove_member(&p, "ann", &root, None).await,
            "remove the last admin",
        );
        assert_eq!(
            gov.role_in(&ann.user_id, "p").await.expect("role"),
            Some(Role::Admin)
        );
    }
}

/// A person the identity provider vouches for is provisioned at their first sign-in;
/// their groups' roles follow the provider at every sign-in (a group removed takes its
/// role away without an admin), an admin's grant still works beside them and wins a
/// tie, a Qanat-disabled user is refused whatever the provider says, and a provider
/// account never takes over a local user by name.
#[tokio::test]
async fn provider_groups_become_roles_that_follow_the_provider() {
    use qanat_governance::{ExternalIdentity, GroupRole, RoleMapping, RoleSource};
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let gov = Governance::new(db.store.clone());
        let [fraud, churn] = qanat_governance::testing::projects(&gov, ["fraud", "churn"]).await;
        let mapping = RoleMapping {
            admin_groups: vec!["ml-admins".into()],
            roles: vec![
                GroupRole {
                    group: "fraud-team".into(),
                    project: "fraud".into(),
                    role: Role::Editor,
                },
                GroupRole {
                    group: "fraud-leads".into(),
                    project: "fraud".into(),
                    role: Role::Maintainer,
                },
                GroupRole {
                    group: "everyone".into(),
                    project: "churn".into(),
                    role: Role::Viewer,
                },
                GroupRole {
                    group: "everyone".into(),
                    project: "gone".into(),
                    role: Role::Viewer,
                },
            ],
        };
        let alice = |groups: &[&str]| ExternalIdentity {
            issuer: "https://idp.example".into(),
            subject: "00u-alice".into(),
            username: "alice".into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        };
        let p = gov
            .sign_in_external(&alice(&["fraud-team", "fraud-leads", "everyone"]), &mapping)
            .await
            .expect("first sign-in provisions");
        assert!(!p.is_admin);
        assert_eq!(gov.user("alice").await.expect("user").kind, UserKind::User);
        let role = |gov: &Governance, uid: qanat_core::UserId, name: &'static str| {
            let gov = gov.clone();
            async move { gov.project_and_role(&uid, name).await.expect("role").1 }
        };
        assert_eq!(
            role(&gov, p.user_id.clone(), "fraud").await,
            Some(Role::Maintainer),
            "the highest group's"
        );
        assert_eq!(
            role(&gov, p.user_id.clone(), "churn").await,
            Some(Role::Viewer)
        );
        assert_eq!(
            gov.projects_for(&p).await.expect("projects").len(),
            2,
            "mapped projects are listed; one that does not exist is skipped"
        );
        assert_eq!(
            gov.role_source(&p.user_id, fraud.id.as_str())
                .await
                .expect("source"),
            Some((
                Role::Maintainer,
                RoleSource::Groups(vec!["fraud-team".into(), "fraud-leads".into()])
            ))
        );

        // The provider drops a group and adds the admin group: applied at the next
        // sign-in, same user.
        let again = gov
            .sign_in_external(&alice(&["fraud-team", "ml-admins"]), &mapping)
            .await
            .expect("again");
        assert_eq!(again.user_id, p.user_id, "found by issuer and subject");
        assert!(again.is_admin, "mapped admin");
        assert_eq!(
            role(&gov, p.user_id.clone(), "fraud").await,
            Some(Role::Editor)
        );
        assert_eq!(
            role(&gov, p.user_id.clone(), "churn").await,
            None,
            "the group's role is gone"
        );

        // An admin's grant beside the mapping: the higher decides, a tie is the grant.
        let admin = gov
            .authenticate(
                &gov.create_token("admin", "t", None)
                    .await
                    .expect("token")
                    .token,
            )
            .await
            .expect("admin");
        gov.set_member(&churn, "alice", Role::Editor, &admin, None)
            .await
            .expect("grant");
        assert_eq!(
            role(&gov, p.user_id.clone(), "churn").await,
            Some(Role::Editor)
        );
        assert_eq!(
            gov.role_source(&p.user_id, churn.id.as_str())
                .await
                .expect("source"),
            Some((Role::Editor, RoleSource::Grant))
        );
        gov.set_member(&fraud, "alice", Role::Editor, &admin, None)
            .await
            .expect("grant");
        assert_eq!(
            gov.role_source(&p.user_id, fraud.id.as_str())
                .await
                .expect("source")
                .map(|r| r.1),
            Some(RoleSource::Grant),
            "a tie goes to the grant"
        );

        // Disabled in Qanat: refused, whatever the provider says; a UI session (a
        // Qanat token of theirs) stops at once too.
        let session = gov
            .create_token("alice", "ui-session", None)
            .await
            .expect("session");
        assert!(
            gov.authenticate(&session.token)
                .await
                .expect("session works")
                .is_admin,
            "mapped admin on their tokens too"
        );
        gov.update_user("alice", None, Some(true))
            .await
            .expect("disable");
        assert!(matches!(
            gov.sign_in_external(&alice(&["ml-admins"]), &mapping).await,
            Err(Error::Unauthenticated(_))
        ));
        assert!(gov.authenticate(&session.token).await.is_err());

        // Another subject with a taken name, or a local user's name: never joined.
        let mallory = ExternalIdentity {
            issuer: "https://idp.example".into(),
            subject: "00u-mallory".into(),
            username: "admin".into(),
            groups: vec!["ml-admins".into()],
        };
        assert!(matches!(
            gov.sign_in_external(&mallory, &mapping).await,
            Err(Error::Forbidden(_))
        ));
        let bad_name = ExternalIdentity {
            username: "no spaces allowed".into(),
            subject: "x".into(),
            ..mallory
        };
        assert!(matches!(
            gov.sign_in_external(&bad_name, &mapping).await,
            Err(Error::Unauthenticated(_))
        ));
    }
}
