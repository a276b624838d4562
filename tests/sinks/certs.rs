//! Throwaway TLS certificates for the local SMTP sink and HTTPS receiver: one test CA
//! per test process and leaf certificates it signs (EC P-256, valid for a day).

use std::sync::OnceLock;

use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::x509::extension::{BasicConstraints, KeyUsage, SubjectAlternativeName};
use openssl::x509::{X509Builder, X509NameBuilder, X509};

/// A certificate authority for tests.
pub struct TestCa {
    cert: X509,
    key: PKey<Private>,
}

/// A leaf certificate and its key, both PEM (the key in PKCS#8).
pub struct Leaf {
    /// The certificate.
    pub cert_pem: Vec<u8>,
    /// The private key.
    pub key_pem: Vec<u8>,
}

impl Leaf {
    /// A native-tls acceptor serving this certificate.
    pub fn acceptor(&self) -> tokio_native_tls::TlsAcceptor {
        let id = native_tls::Identity::from_pkcs8(&self.cert_pem, &self.key_pem).expect("identity");
        tokio_native_tls::TlsAcceptor::from(native_tls::TlsAcceptor::new(id).expect("acceptor"))
    }
}

fn key() -> PKey<Private> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap();
    PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap()
}

fn serial() -> openssl::asn1::Asn1Integer {
    let mut bn = BigNum::new().unwrap();
    bn.rand(64, MsbOption::MAYBE_ZERO, false).unwrap();
    bn.to_asn1_integer().unwrap()
}

fn name(cn: &str) -> openssl::x509::X509Name {
    let mut n = X509NameBuilder::new().unwrap();
    n.append_entry_by_text("CN", cn).unwrap();
    n.build()
}

impl TestCa {
    /// The process-wide test CA.
    pub fn get() -> &'static TestCa {
        static CA: OnceLock<TestCa> = OnceLock::new();
        CA.get_or_init(TestCa::new)
    }

    /// A new CA (tests of untrusted certificates use a second one).
    pub fn new() -> TestCa {
        let key = key();
        let mut b = X509Builder::new().unwrap();
        b.set_version(2).unwrap();
        b.set_serial_number(&serial()).unwrap();
        let n = name("hk test CA");
        b.set_subject_name(&n).unwrap();
        b.set_issuer_name(&n).unwrap();
        b.set_pubkey(&key).unwrap();
        b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        b.set_not_after(&Asn1Time::days_from_now(1).unwrap())
            .unwrap();
        b.append_extension(BasicConstraints::new().critical().ca().build().unwrap())
            .unwrap();
        b.append_extension(
            KeyUsage::new()
                .critical()
                .key_cert_sign()
                .crl_sign()
                .build()
                .unwrap(),
        )
        .unwrap();
        b.sign(&key, MessageDigest::sha256()).unwrap();
        TestCa {
            cert: b.build(),
            key,
        }
    }

    /// The CA certificate (PEM), for `SMTP_CA_BUNDLE` and extra roots.
    pub fn cert_pem(&self) -> Vec<u8> {
        self.cert.to_pem().unwrap()
    }

    /// The CA certificate as a native-tls root.
    pub fn native(&self) -> native_tls::Certificate {
        native_tls::Certificate::from_pem(&self.cert_pem()).unwrap()
    }

    /// A leaf for `dns` names and `ips`.
    pub fn issue(&self, dns: &[&str], ips: &[&str]) -> Leaf {
        let key = key();
        let mut b = X509Builder::new().unwrap();
        b.set_version(2).unwrap();
        b.set_serial_number(&serial()).unwrap();
        b.set_subject_name(&name(dns.first().copied().unwrap_or("localhost")))
            .unwrap();
        b.set_issuer_name(self.cert.subject_name()).unwrap();
        b.set_pubkey(&key).unwrap();
        b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        b.set_not_after(&Asn1Time::days_from_now(1).unwrap())
            .unwrap();
        let mut san = SubjectAlternativeName::new();
        for d in dns {
            san.dns(d);
        }
        for i in ips {
            san.ip(i);
        }
        let san = san
            .build(&b.x509v3_context(Some(&self.cert), None))
            .unwrap();
        b.append_extension(san).unwrap();
        b.sign(&self.key, MessageDigest::sha256()).unwrap();
        Leaf {
            cert_pem: b.build().to_pem().unwrap(),
            key_pem: key.private_key_to_pem_pkcs8().unwrap(),
        }
    }

    /// Write the CA certificate to a file and return its path (for `SMTP_CA_BUNDLE`).
    pub fn write_bundle(&self) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("hk-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("ca-{}.pem", uuid::Uuid::new_v4().simple()));
        std::fs::write(&path, self.cert_pem()).unwrap();
        path
    }
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}
