//! GitLab's encrypted web-hook attributes (behaviour §S3: `attr_encrypted`, AES-256-GCM,
//! the key cut from `db_key_base`, Base64 `pack('m')`).
//!
//! Owns: the key derivation, decryption of `encrypted_url` / `encrypted_token` with their
//! IVs (every configured key in order), and the matching encryption for fixtures and demo
//! data (the bundle never writes encrypted columns). It never logs.

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;

/// Why a value could not be decrypted. Carries no secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecryptError {
    /// No key is configured.
    #[error("no db_key_base is configured")]
    NoKey,
    /// The value or IV is not Base64, or the IV has the wrong length.
    #[error("the encrypted value or its IV is malformed")]
    Malformed,
    /// No configured key authenticates the value.
    #[error("no configured db_key_base decrypts the value")]
    WrongKey,
    /// The plaintext is not UTF-8.
    #[error("the decrypted value is not UTF-8")]
    NotUtf8,
}

/// The 32-byte AES key derived from one `db_key_base` (GitLab's `ensure_utf8_size`).
pub fn derive_key(db_key_base: &str) -> [u8; 32] {
    let mut out = String::new();
    for ch in db_key_base.chars() {
        if out.len() + ch.len_utf8() > 32 {
            break;
        }
        out.push(ch);
    }
    while out.len() < 32 {
        out.push('0');
    }
    let mut key = [0u8; 32];
    key.copy_from_slice(out.as_bytes());
    key
}

/// The configured keys, in the order they are tried.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyRing(Vec<[u8; 32]>);

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyRing({} keys)", self.0.len())
    }
}

impl KeyRing {
    /// Keys from a comma-separated `db_key_base` list (blanks ignored).
    pub fn from_list(list: &str) -> KeyRing {
        KeyRing(
            list.split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(derive_key)
                .collect(),
        )
    }

    /// Whether no key is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Decrypt an `encrypted_<attr>` value with its `encrypted_<attr>_iv`, trying each
    /// key in order.
    pub fn decrypt(&self, value_b64: &str, iv_b64: &str) -> Result<String, DecryptError> {
        if self.0.is_empty() {
            return Err(DecryptError::NoKey);
        }
        let value = decode_m(value_b64).ok_or(DecryptError::Malformed)?;
        let iv = decode_m(iv_b64).ok_or(DecryptError::Malformed)?;
        if iv.len() != 12 || value.len() < 16 {
            return Err(DecryptError::Malformed);
        }
        for key in &self.0 {
            let cipher = Aes256Gcm::new(key.into());
            if let Ok(plain) = cipher.decrypt(Nonce::from_slice(&iv), value.as_slice()) {
                return String::from_utf8(plain).map_err(|_| DecryptError::NotUtf8);
            }
        }
        Err(DecryptError::WrongKey)
    }
}

/// Encrypt `plaintext` as GitLab stores it, with the given 12-byte IV: returns
/// `(encrypted_value, encrypted_value_iv)`, both in `pack('m')` Base64. For fixtures
/// and demo data only.
pub fn encrypt_with_iv(plaintext: &str, db_key_base: &str, iv: [u8; 12]) -> (String, String) {
    let key = derive_key(db_key_base);
    let cipher = Aes256Gcm::new((&key).into());
    let sealed = cipher
        .encrypt(Nonce::from_slice(&iv), plaintext.as_bytes())
        .expect("AES-GCM encryption of an in-memory value cannot fail");
    (encode_m(&sealed), encode_m(&iv))
}

/// [`encrypt_with_iv`] with a random IV, as GitLab does on every write.
pub fn encrypt(plaintext: &str, db_key_base: &str) -> (String, String) {
    let mut iv = [0u8; 12];
    crate::random::fill(&mut iv);
    encrypt_with_iv(plaintext, db_key_base, iv)
}

/// Ruby's `[bytes].pack('m')`: standard Base64, a newline after every 60 characters
/// and after the last line; empty input gives an empty string.
pub fn encode_m(bytes: &[u8]) -> String {
    let flat = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut out = String::with_capacity(flat.len() + flat.len() / 60 + 1);
    for chunk in flat.as_bytes().chunks(60) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        out.push('\n');
    }
    out
}

/// Decode `pack('m')` Base64, ignoring ASCII whitespace; `None` when invalid.
pub fn decode_m(text: &str) -> Option<Vec<u8>> {
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .ok()
}
