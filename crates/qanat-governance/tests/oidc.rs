//! A provider's access tokens as bearer tokens, through `Governance::authenticate`,
//! against a provider stand-in served here (discovery document and keys over HTTP,
//! tokens signed with generated ES256 keys): what the provider's keys and claims
//! decide. The real provider (oidc-provider on Node, RS256) is driven by the
//! compatibility suite.

use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use qanat_governance::{
    Error, Governance, GroupRole, Oidc, OidcConfig, Role, RoleMapping, TokenScope,
};
use qanat_store::testing::TestDb;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Key {
    kid: String,
    pair: EcdsaKeyPair,
}

impl Key {
    fn new(kid: &str) -> Key {
        let rng = SystemRandom::new();
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("pair");
        Key {
            kid: kid.into(),
            pair,
        }
    }

    fn jwk(&self) -> Value {
        let p = self.pair.public_key().as_ref();
        json!({"kty": "EC", "crv": "P-256", "kid": self.kid, "use": "sig", "alg": "ES256",
               "x": URL_SAFE_NO_PAD.encode(&p[1..33]), "y": URL_SAFE_NO_PAD.encode(&p[33..65])})
    }

    fn sign(&self, claims: &Value) -> String {
        let enc = |v: &Value| URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).expect("json"));
        let input = format!(
            "{}.{}",
            enc(&json!({"alg": "ES256", "kid": self.kid, "typ": "at+jwt"})),
            enc(claims)
        );
        let sig = self
            .pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .expect("sign");
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }
}

/// Serves the discovery document and the keys `jwks` holds at the time of asking;
/// answers until the returned handle is aborted.
async fn provider(jwks: Arc<Mutex<Value>>) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let issuer = format!("http://{}", listener.local_addr().expect("addr"));
    let iss = issuer.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let (iss, jwks) = (iss.clone(), jwks.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]);
                let path = req.split_whitespace().nth(1).unwrap_or("/");
                let body = match path {
                    "/.well-known/openid-configuration" => json!({
                        "issuer": iss, "authorization_endpoint": format!("{iss}/auth"),
                        "token_endpoint": format!("{iss}/token"), "jwks_uri": format!("{iss}/jwks")}),
                    "/jwks" => jwks.lock().expect("jwks").clone(),
                    _ => json!({}),
                }
                .to_string();
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    (issuer, task)
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

#[tokio::test]
async fn the_providers_tokens_are_accepted_only_when_its_keys_and_claims_say_so() {
    for db in TestDb::all(&[&qanat_governance::MIGRATIONS]).await {
        let k1 = Key::new("k1");
        let jwks = Arc::new(Mutex::new(json!({"keys": [k1.jwk()]})));
        let (issuer, server) = provider(jwks.clone()).await;
        let oidc = Oidc::new(OidcConfig {
            issuer: issuer.clone(),
            client_id: "qanat".into(),
            audience: "qanat".into(),
            username_claim: "preferred_username".into(),
            groups_claim: "groups".into(),
            mapping: RoleMapping {
                admin_groups: vec![],
                roles: vec![GroupRole {
                    group: "fraud-team".into(),
                    project: "fraud".into(),
                    role: Role::Editor,
                }],
            },
            leeway_secs: 30,
            client_secret: None,
            scopes: "openid".into(),
            cli_client_id: "qanat".into(),
            cli_scopes: "openid".into(),
            redirect_url: None,
            session_check_secs: 300,
            auth_params: vec![],
        })
        .expect("oidc");
        let gov = Governance::new(db.store.clone()).with_oidc(
            oidc,
            qanat_store::Keyring::from_base64(&qanat_store::Keyring::generate_base64())
                .expect("a fresh key"),
        );
        qanat_governance::testing::projects(&gov, ["fraud"]).await;
        let claims = |sub: &str, name: &str| {
            json!({"iss": issuer, "aud": "qanat", "sub": sub, "preferred_username": name,
                   "groups": ["fraud-team"], "iat": now(), "exp": now() + 300})
        };
        let unauthenticated = |r: Result<qanat_governance::Principal, Error>, why: &str| match r {
            Err(Error::Unauthenticated(m)) => m,
            other => panic!("{why}: expected a refusal, got {other:?}"),
        };

        // A good token: alice provisioned, her group's role applied.
        let token = k1.sign(&claims("sub-alice", "alice"));
        let alice = gov.authenticate(&token).await.expect("accepted");
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.scope, TokenScope::All);
        assert_eq!(
            gov.role_in(&alice.user_id, "fraud").await.expect("role"),
            Some(Role::Editor)
        );

        // Tampered, unsigned, another audience, another issuer, expired: refused.
        let mut parts: Vec<String> = token.split('.').map(String::from).collect();
        let mut forged = claims("sub-alice", "alice");
        forged["groups"] = json!(["fraud-team", "ml-admins"]);
        parts[1] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).expect("json"));
        let m = unauthenticated(gov.authenticate(&parts.join(".")).await, "tampered");
        assert!(m.contains("signature"), "{m}");
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD
                .encode(serde_json::to_vec(&claims("sub-alice", "alice")).expect("json"))
        );
        let m = unauthenticated(gov.authenticate(&none).await, "alg none");
        assert!(m.contains("'none'"), "{m}");
        let mut c = claims("sub-alice", "alice");
        c["aud"] = "other".into();
        let m = unauthenticated(gov.authenticate(&k1.sign(&c)).await, "audience");
        assert!(m.contains("not for this server"), "{m}");
        let mut c = claims("sub-alice", "alice");
        c["iss"] = "https://elsewhere.example".into();
        unauthenticated(gov.authenticate(&k1.sign(&c)).await, "issuer");
        let mut c = claims("sub-alice", "alice");
        c["exp"] = (now() - 120).into();
        let m = unauthenticated(gov.authenticate(&k1.sign(&c)).await, "expired");
        assert!(m.contains("expired"), "{m}");
        unauthenticated(gov.authenticate("not-a-token").await, "garbage");

        // The provider rotates its keys: a token of the new key is accepted (the keys
        // are fetched again), one of the retired key is refused.
        let k2 = Key::new("k2");
        *jwks.lock().expect("jwks") = json!({"keys": [k2.jwk()]});
        let bob = gov
            .authenticate(&k2.sign(&claims("sub-bob", "bob")))
            .await
            .expect("new key");
        assert_eq!(bob.name, "bob");
        let m = unauthenticated(
            gov.authenticate(&k1.sign(&claims("sub-carol", "carol")))
                .await,
            "retired key",
        );
        assert!(m.contains("does not publish"), "{m}");

        // The provider down: the keys held still check its tokens.
        server.abort();
        let again = gov
            .authenticate(&k2.sign(&claims("sub-bob", "bob")))
            .await
            .expect("keys held");
        assert_eq!(again.user_id, bob.user_id);

        // Disabled in Qanat: refused at once, whatever the provider signs.
        gov.update_user("bob", None, Some(true))
            .await
            .expect("disable");
        let m = unauthenticated(
            gov.authenticate(&k2.sign(&claims("sub-bob", "bob"))).await,
            "disabled",
        );
        assert!(m.contains("disabled"), "{m}");
    }
}
