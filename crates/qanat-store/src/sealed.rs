//! Small secrets kept in metadata rows (a webhook's signing secret, later a
//! connection's password), encrypted at rest like objects are: each secret gets its
//! own data key, wrapped by the master key in `data_keys`, so key rotation re-wraps it
//! with everything else and forgetting the data key erases the secret for good.
//!
//! A sealed secret is the text `s1:<key_ref hex>:<base64 nonce ‖ ciphertext ‖ tag>`.
//! The purpose (e.g. `webhook-secret`) is bound as associated data: a sealed value
//! copied into a row of another kind does not open.

use base64::Engine as _;
use rand::RngCore;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};

use crate::keyring::parse_key_ref;
use crate::{Error, Keyring, MetaStore, Result};

const PREFIX: &str = "s1";

fn aad(purpose: &str, key_ref: &[u8; 16]) -> Vec<u8> {
    [
        b"qanat-sealed-v1:",
        purpose.as_bytes(),
        b":",
        key_ref.as_slice(),
    ]
    .concat()
}

fn cipher(key: &[u8; 32]) -> Result<LessSafeKey> {
    UnboundKey::new(&AES_256_GCM, key)
        .map(LessSafeKey::new)
        .map_err(|_| Error::Keys("bad data key".into()))
}

fn parts(sealed: &str) -> Result<([u8; 16], Vec<u8>)> {
    let bad = || Error::Keys("a sealed secret is malformed".into());
    let mut it = sealed.splitn(3, ':');
    if it.next() != Some(PREFIX) {
        return Err(bad());
    }
    let key_ref = parse_key_ref(it.next().ok_or_else(bad)?)?;
    let body = base64::engine::general_purpose::STANDARD
        .decode(it.next().ok_or_else(bad)?)
        .map_err(|_| bad())?;
    if body.len() < 12 + 16 {
        return Err(bad());
    }
    Ok((key_ref, body))
}

impl Keyring {
    /// Encrypts `secret` under a fresh data key for `purpose`; the text returned is
    /// what the row stores.
    #[qanat_macros::boxed]
    pub async fn seal(&self, meta: &MetaStore, purpose: &str, secret: &[u8]) -> Result<String> {
        let (key_ref, dek) = self.new_data_key(meta).await?;
        let mut nonce = [0u8; 12];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let mut buf = secret.to_vec();
        cipher(&dek.0)?
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(purpose, &key_ref)),
                &mut buf,
            )
            .map_err(|_| Error::Keys("sealing a secret failed".into()))?;
        let body = [nonce.as_slice(), &buf].concat();
        Ok(format!(
            "{PREFIX}:{}:{}",
            hex::encode(key_ref),
            base64::engine::general_purpose::STANDARD.encode(body)
        ))
    }

    /// Decrypts what [`Keyring::seal`] returned for the same `purpose`.
    #[qanat_macros::boxed]
    pub async fn open(&self, meta: &MetaStore, purpose: &str, sealed: &str) -> Result<Vec<u8>> {
        let (key_ref, body) = parts(sealed)?;
        let dek = self.data_key(meta, &key_ref).await?;
        let mut nonce = [0u8; 12];
        nonce.copy_from_slice(&body[..12]);
        let mut buf = body[12..].to_vec();
        let plain = cipher(&dek.0)?
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad(purpose, &key_ref)),
                &mut buf,
            )
            .map_err(|_| {
                Error::Keys(
                    "a sealed secret failed to open: altered, or sealed for another use".into(),
                )
            })?;
        Ok(plain.to_vec())
    }

    /// Forgets the data key of a sealed secret that is being replaced or deleted, so
    /// no copy of the row (a backup, a replica) can be opened afterwards.
    #[qanat_macros::boxed]
    pub async fn forget(&self, meta: &MetaStore, sealed: &str) -> Result<()> {
        let (key_ref, _) = parts(sealed)?;
        self.forget_data_key(meta, &key_ref).await
    }
}
