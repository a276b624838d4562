//! The registry token, GitLab's way: a JWT signed RS256 with GitLab's registry key
//! (`registry.key`), the way GitLab's `JSONWebToken::RSAToken` and
//! `Auth::ContainerRegistryAuthenticationService` mint it, so a registry configured for
//! GitLab (`auth.token.issuer`, `service`, `rootcertbundle`) accepts it.
//!
//! Owns: [`SigningKey`] (the parsed key, PKCS#1 or PKCS#8 PEM, and its libtrust key id,
//! the `kid` header the registry looks the certificate up by) and [`Access`] (one
//! repository and its actions). Signing uses ring; the JWT is built by hand (base64url
//! JSON parts), no JWT crate.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use ring::rand::SystemRandom;
use ring::signature::{KeyPair, RsaKeyPair, RSA_PKCS1_SHA256};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// GitLab's default `container_registry_token_expire_delay`: 5 minutes.
pub const TOKEN_LIFETIME_SECS: i64 = 5 * 60;

/// GitLab's `JSONWebToken::Token::DEFAULT_NOT_BEFORE_TIME`: `nbf` is `iat` minus 5
/// seconds, for clock skew.
pub const NOT_BEFORE_SECS: i64 = 5;

/// One scope of a token: `{type, name, actions}`.
#[derive(Debug, Clone, Copy)]
pub struct Access<'a> {
    /// The resource type: `repository` (or `registry` for the catalogue).
    pub kind: &'a str,
    /// The repository path (`group/project/name`), or `catalog`.
    pub name: &'a str,
    /// The actions granted (`*`, `pull`, `push`, `delete`).
    pub actions: &'a [&'a str],
}

/// GitLab's registry signing key, parsed once.
pub struct SigningKey {
    pair: RsaKeyPair,
    kid: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

fn bad_key(why: &str) -> Error {
    Error::Config(format!(
        "REGISTRY_KEY: not an RSA private key in PEM (PKCS#1 or PKCS#8): {why}"
    ))
}

impl SigningKey {
    /// Parse an RSA private key, PKCS#1 (`BEGIN RSA PRIVATE KEY`, GitLab's
    /// `registry.key`) or PKCS#8 (`BEGIN PRIVATE KEY`). The error names
    /// `REGISTRY_KEY`, never the key's text.
    pub fn from_pem(pem: &str) -> Result<SigningKey> {
        let der = PrivateKeyDer::from_pem_slice(pem.as_bytes())
            .map_err(|_| bad_key("no private key block"))?;
        let pair = match &der {
            PrivateKeyDer::Pkcs1(k) => RsaKeyPair::from_der(k.secret_pkcs1_der()),
            PrivateKeyDer::Pkcs8(k) => RsaKeyPair::from_pkcs8(k.secret_pkcs8_der()),
            _ => return Err(bad_key("an EC key (the registry key is RSA)")),
        }
        .map_err(|e| bad_key(&e.to_string()))?;
        let kid = libtrust_key_id(&spki_der(pair.public_key().as_ref()));
        Ok(SigningKey {
            pair,
            kid,
            rng: SystemRandom::new(),
        })
    }

    /// The libtrust key id of the public key (the `kid` header).
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// A signed token for `access`, issued at `now`: `iss`, `aud`, `iat`, `nbf`
    /// (`now` − 5 s), `exp` (`now` + 5 min), `jti` (a random UUID) and `access`.
    pub fn token(
        &self,
        issuer: &str,
        audience: &str,
        access: &[Access<'_>],
        now: DateTime<Utc>,
    ) -> Result<String> {
        let header = json!({"typ": "JWT", "alg": "RS256", "kid": self.kid});
        let iat = now.timestamp();
        let access: Vec<_> = access
            .iter()
            .map(|a| json!({"type": a.kind, "name": a.name, "actions": a.actions}))
            .collect();
        let claims = json!({
            "iss": issuer,
            "aud": audience,
            "iat": iat,
            "nbf": iat - NOT_BEFORE_SECS,
            "exp": iat + TOKEN_LIFETIME_SECS,
            "jti": uuid::Uuid::new_v4().to_string(),
            "access": access,
        });
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let mut sig = vec![0; self.pair.public().modulus_len()];
        self.pair
            .sign(
                &RSA_PKCS1_SHA256,
                &self.rng,
                signing_input.as_bytes(),
                &mut sig,
            )
            .map_err(|_| Error::Invariant("registry token: RSA signing failed".into()))?;
        Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig)))
    }
}

/// DER of one TLV with definite length.
fn der_tlv(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = body.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(body);
    out
}

/// The SubjectPublicKeyInfo DER (what OpenSSL's `i2d_PUBKEY`, Ruby's
/// `public_key.to_der` and Go's `x509.MarshalPKIXPublicKey` produce) of a PKCS#1
/// `RSAPublicKey`.
pub fn spki_der(rsa_public_key: &[u8]) -> Vec<u8> {
    // AlgorithmIdentifier { rsaEncryption (1.2.840.113549.1.1.1), NULL }
    const ALG: [u8; 15] = [
        0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00,
    ];
    let mut bits = vec![0u8];
    bits.extend_from_slice(rsa_public_key);
    let mut body = ALG.to_vec();
    body.extend(der_tlv(0x03, &bits));
    der_tlv(0x30, &body)
}

/// libtrust's key id: SHA-256 of the SubjectPublicKeyInfo DER, its first 30 bytes
/// (240 bits) in base32 (RFC 4648 alphabet, 48 characters), in 12 groups of 4 joined
/// by `:`.
pub fn libtrust_key_id(spki: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let digest = Sha256::digest(spki);
    let mut chars = String::with_capacity(48);
    for chunk in digest[..30].chunks(5) {
        let v = chunk.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        for i in (0..8).rev() {
            chars.push(ALPHABET[((v >> (i * 5)) & 31) as usize] as char);
        }
    }
    chars
        .as_bytes()
        .chunks(4)
        .map(|c| std::str::from_utf8(c).expect("ASCII"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    // A throwaway 2048-bit test key (never used anywhere else), PKCS#1 (as GitLab's
    // registry.key) and the same key in PKCS#8. Its kid was computed outside this
    // code: `openssl rsa -pubout -outform DER`, SHA-256, first 30 bytes, Python's
    // base64.b32encode, groups of 4. The integration tests check the same
    // computation against docker-registry, which looks the key up by this id.
    const PKCS1: &str = include_str!("../../../testdata/registry-test-key-pkcs1.pem");
    const PKCS8: &str = include_str!("../../../testdata/registry-test-key-pkcs8.pem");
    const KID: &str = include_str!("../../../testdata/registry-test-kid.txt");

    fn part(token: &str, i: usize) -> serde_json::Value {
        let p = token.split('.').nth(i).unwrap();
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(p).unwrap()).unwrap()
    }

    #[test]
    fn kid_is_libtrusts_key_id_for_both_key_formats() {
        let a = SigningKey::from_pem(PKCS1).unwrap();
        let b = SigningKey::from_pem(PKCS8).unwrap();
        assert_eq!(a.kid(), KID.trim());
        assert_eq!(b.kid(), KID.trim());
        assert!(kid_format_ok(a.kid()), "kid format: {}", a.kid());
    }

    /// 12 groups of 4 base32 characters joined by `:`.
    fn kid_format_ok(kid: &str) -> bool {
        let groups: Vec<&str> = kid.split(':').collect();
        groups.len() == 12
            && groups.iter().all(|g| {
                g.len() == 4
                    && g.bytes()
                        .all(|c| c.is_ascii_uppercase() || (b'2'..=b'7').contains(&c))
            })
    }

    #[test]
    fn key_id_of_known_bytes() {
        // SHA-256("") = e3b0c442…: its first 30 bytes in base32 (Python's
        // base64.b32encode), grouped by 4.
        let id = libtrust_key_id(b"");
        assert_eq!(
            id,
            "4OYM:IQUY:7QOB:JGX3:6TEJ:S35Z:EQT2:4QPE:MSNZ:GTFE:SWMR:W6CS"
        );
    }

    #[test]
    fn token_header_and_claims_follow_gitlab() {
        let key = SigningKey::from_pem(PKCS1).unwrap();
        let now = Utc.with_ymd_and_hms(2026, 11, 26, 12, 0, 0).unwrap();
        let t = key
            .token(
                "gitlab-issuer",
                "container_registry",
                &[Access {
                    kind: "repository",
                    name: "group/sub/project/app",
                    actions: &["*"],
                }],
                now,
            )
            .unwrap();
        assert_eq!(t.split('.').count(), 3);
        let h = part(&t, 0);
        assert_eq!(h["alg"], "RS256");
        assert_eq!(h["typ"], "JWT");
        assert_eq!(h["kid"], KID.trim());
        let c = part(&t, 1);
        let iat = now.timestamp();
        assert_eq!(c["iss"], "gitlab-issuer");
        assert_eq!(c["aud"], "container_registry");
        assert_eq!(c["iat"], iat);
        assert_eq!(c["nbf"], iat - 5);
        assert_eq!(c["exp"], iat + 300);
        assert_eq!(
            c["access"],
            json!([{"type": "repository", "name": "group/sub/project/app", "actions": ["*"]}])
        );
        assert_eq!(c["jti"].as_str().unwrap().len(), 36);
        let t2 = key
            .token(
                "i",
                "a",
                &[Access {
                    kind: "repository",
                    name: "x",
                    actions: &["pull"],
                }],
                now,
            )
            .unwrap();
        assert_ne!(part(&t2, 1)["jti"], c["jti"], "jti is unique per token");
        // The signature verifies with the public key (RS256 over header.claims).
        let (input, sig) = t.rsplit_once('.').unwrap();
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            key.pair.public_key().as_ref(),
        );
        public
            .verify(input.as_bytes(), &URL_SAFE_NO_PAD.decode(sig).unwrap())
            .expect("signature verifies");
    }

    #[test]
    fn a_bad_key_names_registry_key_never_its_text() {
        for pem in [
            "not a key",
            "-----BEGIN RSA PRIVATE KEY-----\nc2VjcmV0LWJ5dGVz\n-----END RSA PRIVATE KEY-----\n",
        ] {
            let e = SigningKey::from_pem(pem).unwrap_err();
            let m = e.to_string();
            assert!(matches!(e, Error::Config(_)), "{m}");
            assert!(m.contains("REGISTRY_KEY"), "{m}");
            assert!(!m.contains("c2VjcmV0"), "{m}");
        }
    }
}
