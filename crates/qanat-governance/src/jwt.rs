//! JSON Web Tokens signed by an OpenID provider (RFC 7515, 7517, 7519): the compact
//! form parsed, its signature checked against the provider's published keys, its
//! claims checked against what this server accepts.
//!
//! Only asymmetric signatures are accepted (RS256/384/512, PS256/384/512, ES256/384,
//! EdDSA with Ed25519): `none` and the HMAC algorithms are refused before any key is
//! looked at, so a token can never choose to be unsigned or to be checked with a
//! public key used as a shared secret. A key is chosen by the token's `kid`; a key
//! that names its own `alg` is used only with that algorithm. Verification is ring's.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Longest token read (a provider's tokens are a few KiB; a header is not a payload).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Why a token was refused, in words a caller can act on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JwtError {
    #[error("the token is not a signed JWT: {0}")]
    Malformed(String),
    #[error("the token's algorithm '{0}' is not accepted (only RS256/384/512, PS256/384/512, ES256/384 and EdDSA are)")]
    Algorithm(String),
    #[error("the token is signed with a key the provider does not publish (kid {0:?})")]
    UnknownKey(Option<String>),
    #[error("the token's signature does not verify")]
    Signature,
    #[error("the token was issued by '{got}', not by the configured provider '{want}'")]
    Issuer { got: String, want: String },
    #[error("the token is meant for {got:?}, not for this server ('{want}')")]
    Audience { got: Vec<String>, want: String },
    #[error("the token expired at {0} (unix seconds)")]
    Expired(i64),
    #[error("the token is not valid before {0} (unix seconds)")]
    NotYetValid(i64),
    #[error("the token lacks the claim '{0}'")]
    Missing(&'static str),
}

/// One public key of a provider's JWKS.
#[derive(Debug, Clone, Deserialize)]
pub struct Jwk {
    #[serde(default)]
    pub kid: Option<String>,
    pub kty: String,
    #[serde(default)]
    pub alg: Option<String>,
    /// `sig` or `enc`; an `enc` key never verifies a signature.
    #[serde(default, rename = "use")]
    pub usage: Option<String>,
    #[serde(default)]
    pub n: Option<String>,
    #[serde(default)]
    pub e: Option<String>,
    #[serde(default)]
    pub crv: Option<String>,
    #[serde(default)]
    pub x: Option<String>,
    #[serde(default)]
    pub y: Option<String>,
}

/// A provider's published keys (`jwks_uri`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct JwkSet {
    pub keys: Vec<Jwk>,
}

#[derive(Debug, Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    crit: Option<Value>,
}

/// A token split and decoded, its signature not yet checked.
#[derive(Debug)]
pub struct Unverified<'a> {
    alg: String,
    pub kid: Option<String>,
    signing_input: &'a str,
    signature: Vec<u8>,
    pub claims: Map<String, Value>,
}

fn b64(part: &str, what: &str) -> Result<Vec<u8>, JwtError> {
    URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| JwtError::Malformed(format!("its {what} is not base64url")))
}

/// Whether `token` has the shape of a compact JWS (three base64url parts), the test
/// that sends a bearer token to the provider's keys rather than to Qanat's own tokens.
pub fn looks_like_jwt(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    parts.len() == 3
        && parts[..2].iter().all(|p| !p.is_empty())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Splits and decodes a compact JWS, refusing unsigned and symmetric algorithms.
pub fn decode(token: &str) -> Result<Unverified<'_>, JwtError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(JwtError::Malformed(format!(
            "it is longer than {MAX_TOKEN_BYTES} bytes"
        )));
    }
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed(
            "a JWT has three parts separated by '.'".into(),
        ));
    };
    let header: Header = serde_json::from_slice(&b64(h, "header")?)
        .map_err(|e| JwtError::Malformed(format!("its header is not a JOSE header: {e}")))?;
    if !ALGORITHMS.contains(&header.alg.as_str()) {
        return Err(JwtError::Algorithm(header.alg));
    }
    // RFC 7515 §4.1.11: an extension this reader does not know must be refused.
    if header.crit.is_some() {
        return Err(JwtError::Malformed(
            "its header names critical extensions ('crit') this server does not implement".into(),
        ));
    }
    let claims: Map<String, Value> = serde_json::from_slice(&b64(p, "payload")?)
        .map_err(|_| JwtError::Malformed("its payload is not a JSON object".into()))?;
    let signature = b64(s, "signature")?;
    Ok(Unverified {
        alg: header.alg,
        kid: header.kid,
        signing_input: &token[..h.len() + 1 + p.len()],
        signature,
        claims,
    })
}

const ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

impl Unverified<'_> {
    /// The key of `keys` that signed this token: the one with its `kid` (any fitting
    /// key when the token names none); `None` when the provider publishes no such key
    /// (perhaps newer than the copy held: fetch the keys again).
    fn key<'k>(&self, keys: &'k JwkSet) -> Option<&'k Jwk> {
        let fits = |k: &&Jwk| {
            k.usage.as_deref().is_none_or(|u| u == "sig")
                && k.alg.as_deref().is_none_or(|a| a == self.alg)
                && match self.alg.as_bytes()[0] {
                    b'R' | b'P' => k.kty == "RSA",
                    b'E' if self.alg == "EdDSA" => k.kty == "OKP",
                    _ => k.kty == "EC",
                }
        };
        match &self.kid {
            Some(kid) => keys
                .keys
                .iter()
                .filter(fits)
                .find(|k| k.kid.as_deref() == Some(kid)),
            None => keys.keys.iter().find(fits),
        }
    }

    /// Checks the signature with the provider's keys.
    pub fn verify_signature(&self, keys: &JwkSet) -> Result<(), JwtError> {
        let key = self
            .key(keys)
            .ok_or_else(|| JwtError::UnknownKey(self.kid.clone()))?;
        let msg = self.signing_input.as_bytes();
        let field = |v: &Option<String>, name: &str| -> Result<Vec<u8>, JwtError> {
            let v = v
                .as_deref()
                .ok_or_else(|| JwtError::Malformed(format!("the provider's key lacks '{name}'")))?;
            b64(v, "key")
        };
        let ok = match self.alg.as_str() {
            rsa @ ("RS256" | "RS384" | "RS512" | "PS256" | "PS384" | "PS512") => {
                let params: &signature::RsaParameters = match rsa {
                    "RS256" => &signature::RSA_PKCS1_2048_8192_SHA256,
                    "RS384" => &signature::RSA_PKCS1_2048_8192_SHA384,
                    "RS512" => &signature::RSA_PKCS1_2048_8192_SHA512,
                    "PS256" => &signature::RSA_PSS_2048_8192_SHA256,
                    "PS384" => &signature::RSA_PSS_2048_8192_SHA384,
                    _ => &signature::RSA_PSS_2048_8192_SHA512,
                };
                let (n, e) = (field(&key.n, "n")?, field(&key.e, "e")?);
                RsaPublicKeyComponents { n: &n, e: &e }
                    .verify(params, msg, &self.signature)
                    .is_ok()
            }
            ec @ ("ES256" | "ES384") => {
                let (alg, crv): (&signature::EcdsaVerificationAlgorithm, &str) = if ec == "ES256" {
                    (&signature::ECDSA_P256_SHA256_FIXED, "P-256")
                } else {
                    (&signature::ECDSA_P384_SHA384_FIXED, "P-384")
                };
                if key.crv.as_deref() != Some(crv) {
                    return Err(JwtError::Signature);
                }
                // An uncompressed point: 0x04, x, y.
                let mut point = vec![4u8];
                point.extend(field(&key.x, "x")?);
                point.extend(field(&key.y, "y")?);
                UnparsedPublicKey::new(alg, point)
                    .verify(msg, &self.signature)
                    .is_ok()
            }
            _ => {
                if key.crv.as_deref() != Some("Ed25519") {
                    return Err(JwtError::Signature);
                }
                UnparsedPublicKey::new(&signature::ED25519, field(&key.x, "x")?)
                    .verify(msg, &self.signature)
                    .is_ok()
            }
        };
        if ok {
            Ok(())
        } else {
            Err(JwtError::Signature)
        }
    }
}

/// What a token's claims must say.
#[derive(Debug, Clone)]
pub struct Expect<'a> {
    /// The provider's issuer, exactly as its discovery document gives it.
    pub issuer: &'a str,
    /// This server's name among the token's audiences (`aud`).
    pub audience: &'a str,
    /// Now, in unix seconds.
    pub now: i64,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    pub leeway: i64,
}

impl Expect<'_> {
    /// Checks issuer, audience, expiry and not-before; returns the expiry.
    pub fn check(&self, claims: &Map<String, Value>) -> Result<i64, JwtError> {
        let iss = claims
            .get("iss")
            .and_then(Value::as_str)
            .ok_or(JwtError::Missing("iss"))?;
        if iss != self.issuer {
            return Err(JwtError::Issuer {
                got: iss.to_string(),
                want: self.issuer.to_string(),
            });
        }
        let aud: Vec<String> = match claims.get("aud") {
            Some(Value::String(a)) => vec![a.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
            _ => return Err(JwtError::Missing("aud")),
        };
        if !aud.iter().any(|a| a == self.audience) {
            return Err(JwtError::Audience {
                got: aud,
                want: self.audience.to_string(),
            });
        }
        let time = |name: &'static str| -> Result<Option<i64>, JwtError> {
            match claims.get(name) {
                None => Ok(None),
                Some(v) => v
                    .as_i64()
                    .or_else(|| v.as_f64().map(|f| f as i64))
                    .map(Some)
                    .ok_or_else(|| JwtError::Malformed(format!("its '{name}' is not a number"))),
            }
        };
        let exp = time("exp")?.ok_or(JwtError::Missing("exp"))?;
        if self.now > exp.saturating_add(self.leeway) {
            return Err(JwtError::Expired(exp));
        }
        if let Some(nbf) = time("nbf")? {
            if nbf > self.now.saturating_add(self.leeway) {
                return Err(JwtError::NotYetValid(nbf));
            }
        }
        Ok(exp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair};

    fn enc(v: &Value) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).expect("json"))
    }

    /// An ES256 key pair and its JWK.
    fn es256(kid: &str) -> (EcdsaKeyPair, Jwk) {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("key");
        let pair = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8.as_ref(),
            &rng,
        )
        .expect("pair");
        let public = pair.public_key().as_ref();
        let jwk = Jwk {
            kid: Some(kid.into()),
            kty: "EC".into(),
            alg: None,
            usage: Some("sig".into()),
            n: None,
            e: None,
            crv: Some("P-256".into()),
            x: Some(URL_SAFE_NO_PAD.encode(&public[1..33])),
            y: Some(URL_SAFE_NO_PAD.encode(&public[33..65])),
        };
        (pair, jwk)
    }

    fn sign_es(pair: &EcdsaKeyPair, header: &Value, claims: &Value) -> String {
        let input = format!("{}.{}", enc(header), enc(claims));
        let sig = pair
            .sign(&SystemRandom::new(), input.as_bytes())
            .expect("sign");
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }

    fn claims(now: i64) -> Value {
        serde_json::json!({"iss": "https://idp.example", "aud": ["qanat", "x"], "sub": "alice", "exp": now + 300, "iat": now})
    }

    fn expect(now: i64) -> Expect<'static> {
        Expect {
            issuer: "https://idp.example",
            audience: "qanat",
            now,
            leeway: 60,
        }
    }

    fn check(token: &str, keys: &JwkSet, now: i64) -> Result<i64, JwtError> {
        let t = decode(token)?;
        t.verify_signature(keys)?;
        expect(now).check(&t.claims)
    }

    #[test]
    fn a_signed_token_for_this_server_passes_and_everything_else_is_refused() {
        let now = 1_800_000_000;
        let (pair, jwk) = es256("k1");
        let (other, other_jwk) = es256("k2");
        let keys = JwkSet {
            keys: vec![jwk.clone()],
        };
        let head = serde_json::json!({"alg": "ES256", "kid": "k1", "typ": "at+jwt"});
        let good = sign_es(&pair, &head, &claims(now));
        assert!(looks_like_jwt(&good));
        assert_eq!(check(&good, &keys, now), Ok(now + 300));

        // Tampered: the payload changed after signing.
        let parts: Vec<&str> = good.split('.').collect();
        let mut forged = claims(now);
        forged["sub"] = "mallory".into();
        let tampered = format!("{}.{}.{}", parts[0], enc(&forged), parts[2]);
        assert_eq!(check(&tampered, &keys, now), Err(JwtError::Signature));

        // Unsigned, or HMAC with the public key as the secret: refused by name.
        let none = format!(
            "{}.{}.",
            enc(&serde_json::json!({"alg": "none"})),
            enc(&claims(now))
        );
        assert_eq!(
            check(&none, &keys, now),
            Err(JwtError::Algorithm("none".into()))
        );
        let hs = format!(
            "{}.{}.c2ln",
            enc(&serde_json::json!({"alg": "HS256", "kid": "k1"})),
            enc(&claims(now))
        );
        assert_eq!(
            check(&hs, &keys, now),
            Err(JwtError::Algorithm("HS256".into()))
        );

        // Signed by a key the provider does not publish (a rotated-out key, say).
        let stranger = sign_es(
            &other,
            &serde_json::json!({"alg": "ES256", "kid": "k2"}),
            &claims(now),
        );
        assert_eq!(
            check(&stranger, &keys, now),
            Err(JwtError::UnknownKey(Some("k2".into())))
        );
        // ... or by another key under a published kid.
        let impostor = sign_es(&other, &head, &claims(now));
        assert_eq!(check(&impostor, &keys, now), Err(JwtError::Signature));
        // Once published (rotation), its tokens pass.
        let rotated = JwkSet {
            keys: vec![jwk, other_jwk],
        };
        assert!(check(&stranger, &rotated, now).is_ok());

        // Another issuer, another audience, expired, not yet valid.
        let mut c = claims(now);
        c["iss"] = "https://evil.example".into();
        assert!(matches!(
            check(&sign_es(&pair, &head, &c), &keys, now),
            Err(JwtError::Issuer { .. })
        ));
        let mut c = claims(now);
        c["aud"] = "other".into();
        assert!(matches!(
            check(&sign_es(&pair, &head, &c), &keys, now),
            Err(JwtError::Audience { .. })
        ));
        assert_eq!(
            check(&good, &keys, now + 300 + 61),
            Err(JwtError::Expired(now + 300))
        );
        assert!(
            check(&good, &keys, now + 300 + 59).is_ok(),
            "within the leeway"
        );
        let mut c = claims(now);
        c["nbf"] = (now + 120).into();
        assert_eq!(
            check(&sign_es(&pair, &head, &c), &keys, now),
            Err(JwtError::NotYetValid(now + 120))
        );
        let mut c = claims(now);
        c.as_object_mut().expect("object").remove("exp");
        assert_eq!(
            check(&sign_es(&pair, &head, &c), &keys, now),
            Err(JwtError::Missing("exp"))
        );
    }

    #[test]
    fn malformed_tokens_are_refused_before_any_key_is_used() {
        for bad in ["", "a.b", "a.b.c.d", "!!.e30.", "e30.e30.e30"] {
            assert!(
                matches!(decode(bad), Err(JwtError::Malformed(_))),
                "{bad:?} was accepted"
            );
        }
        let crit = format!(
            "{}.{}.",
            enc(&serde_json::json!({"alg": "ES256", "crit": ["exp"]})),
            enc(&serde_json::json!({}))
        );
        assert!(matches!(decode(&crit), Err(JwtError::Malformed(_))));
        assert!(!looks_like_jwt("qnt_abc"));
        assert!(decode(&"a".repeat(MAX_TOKEN_BYTES + 1)).is_err());
    }

    #[test]
    fn ed25519_and_rsa_keys_verify_their_own_algorithms_only() {
        let now = 1_800_000_000;
        let rng = SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).expect("key");
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("pair");
        let jwk = Jwk {
            kid: Some("ed".into()),
            kty: "OKP".into(),
            alg: Some("EdDSA".into()),
            usage: None,
            n: None,
            e: None,
            crv: Some("Ed25519".into()),
            x: Some(URL_SAFE_NO_PAD.encode(pair.public_key().as_ref())),
            y: None,
        };
        let input = format!(
            "{}.{}",
            enc(&serde_json::json!({"alg": "EdDSA", "kid": "ed"})),
            enc(&claims(now))
        );
        let token = format!(
            "{input}.{}",
            URL_SAFE_NO_PAD.encode(pair.sign(input.as_bytes()).as_ref())
        );
        let keys = JwkSet { keys: vec![jwk] };
        assert!(check(&token, &keys, now).is_ok());
        // The same key named by a token claiming RS256: no RSA key has that kid.
        let input = format!(
            "{}.{}",
            enc(&serde_json::json!({"alg": "RS256", "kid": "ed"})),
            enc(&claims(now))
        );
        let token = format!(
            "{input}.{}",
            URL_SAFE_NO_PAD.encode(pair.sign(input.as_bytes()).as_ref())
        );
        assert_eq!(
            check(&token, &keys, now),
            Err(JwtError::UnknownKey(Some("ed".into())))
        );
    }
}
