//! B28 deliveries observed for real, for the reliability tests: an SMTP sink speaking
//! STARTTLS and an HTTP receiver behind public-looking hook host names, wired into a
//! [`Notifier`] as `deliver-notification` uses it. What arrived is grouped by its
//! idempotency key (the email `Message-ID`, the web hook's `Idempotency-Key`), so a
//! test can compare the set of notices delivered and check that every repeat carries
//! the same key and the same content.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use shared::notify::webhook::WebhookClient;
use shared::notify::{Notifier, NotifyConfig};

use crate::db::TestDb;
use crate::sinks::certs::TestCa;
use crate::sinks::http::HttpReceiver;
use crate::sinks::net::TestNetwork;
use crate::sinks::smtp::{SinkTls, SmtpSink};

/// The SMTP password the notifier authenticates with (a secret to search for).
pub const SMTP_PASSWORD: &str = "smtp-Secret-pa55word";

/// The demo hooks, pointed at public names: `(hook id, plain URL)`.
pub const PUBLIC_HOOKS: [(i64, &str); 3] = [
    (
        6001,
        "http://hooks-site.example.net/hooks/site?secret=url-s3cret-6001",
    ),
    (
        6002,
        "http://hooks-acme.example.net/hooks/acme?secret=url-s3cret-6002",
    ),
    (
        6003,
        "http://hooks-off.example.net/hooks/off?secret=url-s3cret-6003",
    ),
];

/// Re-encrypt the demo hooks' URLs (demo `db_key_base`) so they name public hosts,
/// which the test network routes to the receiver: delivery then really happens.
pub async fn publish_demo_hooks(db: &TestDb) {
    for (id, url) in PUBLIC_HOOKS {
        // A fixed IV per hook: every copy of the data set stores the same ciphertext.
        let (v, iv) = shared::notify::crypto::encrypt_with_iv(
            url,
            lab::demo::DEMO_DB_KEY_BASE,
            [id as u8; 12],
        );
        db.client
            .execute(
                "UPDATE web_hooks SET encrypted_url = $1, encrypted_url_iv = $2 WHERE id = $3",
                &[&v, &iv, &id],
            )
            .await
            .unwrap();
    }
}

/// The sinks and the notifier that delivers to them.
pub struct Notices {
    /// The SMTP sink.
    pub smtp: SmtpSink,
    /// The web-hook receiver.
    pub hooks: HttpReceiver,
    /// Name resolution and routing of the hook hosts.
    pub network: Arc<TestNetwork>,
    /// What `deliver-notification` (and `pat-expiring`) run with.
    pub notifier: Arc<Notifier>,
}

impl Notices {
    /// Start the sinks and build the notifier (demo key, STARTTLS with the test CA,
    /// local targets refused as in production).
    pub async fn start() -> Notices {
        let smtp = SmtpSink::start(SinkTls::StartTls).await;
        let hooks = HttpReceiver::start().await;
        let network = Arc::new(TestNetwork::new());
        for (i, (_, url)) in PUBLIC_HOOKS.iter().enumerate() {
            let host = url::Url::parse(url)
                .unwrap()
                .host_str()
                .unwrap()
                .to_string();
            let ip = format!("203.0.113.{}", 10 + i);
            network
                .name(&host, &[&ip])
                .route(&format!("{ip}:80"), hooks.addr);
        }
        let env: HashMap<&str, String> = HashMap::from([
            ("GITLAB_BASE_URL", "https://gitlab.example.com".to_string()),
            ("GITLAB_VERSION", "18.0.1".to_string()),
            (
                "GITLAB_DB_KEY_BASE",
                lab::demo::DEMO_DB_KEY_BASE.to_string(),
            ),
            (
                "MAIL_FROM",
                "GitLab <gitlab@gitlab.example.com>".to_string(),
            ),
            ("EMAIL_TRANSPORT", "smtp".to_string()),
            ("SMTP_HOST", "127.0.0.1".to_string()),
            ("SMTP_PORT", smtp.port.to_string()),
            ("SMTP_TLS", "starttls".to_string()),
            ("SMTP_USERNAME", "mailer".to_string()),
            ("SMTP_PASSWORD", SMTP_PASSWORD.to_string()),
            (
                "SMTP_CA_BUNDLE",
                TestCa::get().write_bundle().to_string_lossy().into_owned(),
            ),
        ]);
        let cfg = NotifyConfig::from_lookup(&|k: &str| env.get(k).cloned()).unwrap();
        let mut n = Notifier::full(&cfg, None).await.unwrap();
        let d = &mut n.delivery;
        d.webhooks = WebhookClient::new(
            Duration::from_secs(5),
            shared::notify::LocalNetwork::Deny,
            &[],
        )
        .unwrap()
        .with_network(network.clone());
        Notices {
            smtp,
            hooks,
            network,
            notifier: Arc::new(n),
        }
    }

    /// Every email that arrived, by `Message-ID`: the text of each copy.
    pub fn emails(&self) -> BTreeMap<String, Vec<String>> {
        let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in self.smtp.received() {
            let id = r
                .header("Message-ID")
                .expect("every email has a Message-ID");
            let copy = format!(
                "to={:?} subject={:?}\n{}",
                r.rcpt_to,
                r.header("Subject"),
                r.text()
            );
            m.entry(id).or_default().push(copy);
        }
        m
    }

    /// Every web-hook request that arrived, by `Idempotency-Key`: the event UUID,
    /// path and body of each copy.
    pub fn webhooks(&self) -> BTreeMap<String, Vec<String>> {
        let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for q in self.hooks.requests() {
            let key = q
                .header("idempotency-key")
                .expect("every web hook has an Idempotency-Key")
                .to_string();
            let copy = format!(
                "{} {:?} {:?} {}",
                q.path,
                q.header("x-gitlab-event-uuid"),
                q.header("x-gitlab-webhook-uuid"),
                String::from_utf8_lossy(&q.body)
            );
            m.entry(key).or_default().push(copy);
        }
        m
    }
}

/// Check that every repeated delivery of a key carried the same content; returns the
/// number of repeats (deliveries beyond the first).
pub fn repeats_are_identical(delivered: &BTreeMap<String, Vec<String>>) -> usize {
    let mut repeats = 0;
    for (key, copies) in delivered {
        for c in &copies[1..] {
            assert_eq!(
                c, &copies[0],
                "a repeat of {key} differs from the first copy"
            );
        }
        repeats += copies.len() - 1;
    }
    repeats
}
