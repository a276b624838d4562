//! Secrets never travel in messages and are never logged (behaviour §8, §9.11): every
//! batch (B28's deliveries included, by SMTP and web hook) runs until idle on the
//! demo data with secrets planted in every column that holds one (email and
//! notification addresses, invite addresses and tokens, token digests, encrypted hook
//! URLs and tokens), a password in the database URL, the SMTP password and the
//! `db_key_base`, once cleanly and once under chaos (so error and crash paths log
//! too). Every log line, every sent message body (outbox files included) and every
//! dead letter is searched for every secret, decrypted hook URLs, hosts and tokens
//! included.

use std::collections::BTreeSet;

use engine::chaos::ChaosSpec;
use engine::local::Runner;
use integration_tests::logs::capture;
use integration_tests::notice::{publish_demo_hooks, Notices, SMTP_PASSWORD};
use integration_tests::state::demo_without_ghost;
use integration_tests::{t, TestDb};
use shared::config::Config;
use shared::db::Connector;
use shared::messages::Envelope;
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";
const DB_PASSWORD: &str = "pg-Secret-Passw0rd";

const CRONS: [Function; 5] = [
    Function::RemoveExpiredMembers,
    Function::SchedulePruneDeletions,
    Function::AdjournedGroupDeletion,
    Function::PlaceholderUserCleanup,
    Function::PatExpiring,
];

/// Plant a secret in every secret-bearing column, and return every secret value.
async fn plant(db: &TestDb) -> BTreeSet<String> {
    db.exec(
        "UPDATE users SET notification_email = 'notify-' || id || '@mail.secret.example';
         UPDATE members SET invite_email = 'invitee-' || id || '@secret.example',
                            invite_token = 'invite-token-secret-' || id
           WHERE user_id IS NULL;
         INSERT INTO personal_access_tokens (user_id, name, created_at, updated_at, organization_id)
           SELECT id, 'deploy', '2024-01-01', '2024-01-01', 1 FROM users WHERE user_type IN (6, 15);
         UPDATE personal_access_tokens SET token_digest = 'glpat-digest-secret-' || id;
         UPDATE web_hooks SET encrypted_url = 'enc-url-secret-' || id, encrypted_url_iv = 'iv-url-secret-' || id,
                              encrypted_token = 'enc-token-secret-' || id, encrypted_token_iv = 'iv-token-secret-' || id
           WHERE id NOT BETWEEN 6001 AND 6999;",
    )
    .await;
    let mut secrets: BTreeSet<String> = BTreeSet::new();
    for sql in [
        "SELECT email FROM users WHERE email <> ''",
        "SELECT notification_email FROM users WHERE notification_email IS NOT NULL",
        "SELECT invite_email FROM members WHERE invite_email IS NOT NULL",
        "SELECT invite_token FROM members WHERE invite_token IS NOT NULL",
        "SELECT token_digest FROM personal_access_tokens WHERE token_digest IS NOT NULL",
        "SELECT encrypted_url FROM web_hooks WHERE encrypted_url IS NOT NULL",
        "SELECT encrypted_url_iv FROM web_hooks WHERE encrypted_url_iv IS NOT NULL",
        "SELECT encrypted_token FROM web_hooks WHERE encrypted_token IS NOT NULL",
        "SELECT encrypted_token_iv FROM web_hooks WHERE encrypted_token_iv IS NOT NULL",
    ] {
        for r in db.client.query(sql, &[]).await.unwrap() {
            secrets.insert(r.get::<_, String>(0));
        }
    }
    secrets.insert(DB_PASSWORD.to_string());
    // B28: the SMTP password, the db_key_base (and its halves), and every hook's
    // decrypted URL, host, URL secret and token.
    secrets.insert(SMTP_PASSWORD.to_string());
    let key = lab::demo::DEMO_DB_KEY_BASE;
    secrets.extend([key, &key[..32], &key[32..64]].map(str::to_string));
    let ring = shared::notify::crypto::KeyRing::from_list(key);
    for r in db
        .client
        .query(
            "SELECT encrypted_url, encrypted_url_iv, encrypted_token, encrypted_token_iv
             FROM web_hooks WHERE id BETWEEN 6001 AND 6999",
            &[],
        )
        .await
        .unwrap()
    {
        let url = ring.decrypt(r.get(0), r.get(1)).unwrap();
        let u = url::Url::parse(&url).unwrap();
        secrets.insert(u.host_str().unwrap().to_string());
        secrets.insert(u.query().unwrap().to_string());
        secrets.insert(url);
        if let (Some(t), Some(iv)) = (r.get::<_, Option<&str>>(2), r.get::<_, Option<&str>>(3)) {
            secrets.insert(ring.decrypt(t, iv).unwrap());
        }
    }
    secrets
}

fn url_with_password(db: &TestDb) -> String {
    db.url
        .replacen("postgres@", &format!("postgres:{DB_PASSWORD}@"), 1)
}

/// Every batch until idle; returns what was written where a secret could leak.
async fn run_everything(
    db: &TestDb,
    chaos: Option<&str>,
    outbox: &std::path::Path,
    notices: &Notices,
) -> Vec<String> {
    let connector = Connector::from_url(&url_with_password(db)).unwrap();
    let mut texts = Vec::new();
    for (i, f) in CRONS.iter().enumerate() {
        let mut r = Runner::new(connector.clone(), Default::default(), t(NOW))
            .with_notifier(notices.notifier.clone())
            .with_outbox(outbox.join(format!("{i}")))
            .unwrap();
        if let Some(c) = chaos {
            r = r.with_chaos(c.parse::<ChaosSpec>().unwrap());
        }
        r.run_until_idle(*f, &Envelope::cron(*f, "secrets", t(NOW)).to_body())
            .await
            .unwrap();
        texts.extend(
            r.queue()
                .sent()
                .iter()
                .map(|s| s.message.envelope.to_body()),
        );
        texts.extend(r.dead_letters().iter().map(|m| m.envelope.to_body()));
        texts.extend(r.runs.iter().map(|run| run.to_json().to_string()));
    }
    for dir in std::fs::read_dir(outbox).unwrap() {
        for f in std::fs::read_dir(dir.unwrap().path()).unwrap() {
            texts.push(std::fs::read_to_string(f.unwrap().path()).unwrap());
        }
    }
    texts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_of_the_data_appears_in_any_log_line_or_message() {
    let mut checked = 0usize;
    for chaos in [None, Some("seed=9,duplicate=0.5,reorder,crash=0.5")] {
        let db = demo_without_ghost(t(NOW)).await;
        publish_demo_hooks(&db).await;
        let secrets = plant(&db).await;
        let notices = Notices::start().await;
        assert!(secrets.len() > 1000, "{} secrets", secrets.len());
        let outbox = std::env::temp_dir().join(format!("hk-secrets-{}", uuid::Uuid::new_v4()));
        let (log, _g) = capture();
        let texts = run_everything(&db, chaos, &outbox, &notices).await;
        // B28 really delivered: emails and a web hook went out.
        assert!(!notices.emails().is_empty() && !notices.webhooks().is_empty());
        // The hook's own request carried its token (the search would find it).
        assert!(notices.hooks.requests().iter().any(|q| q
            .header("x-gitlab-token")
            .is_some_and(|v| secrets.contains(v))));
        let _ = std::fs::remove_dir_all(&outbox);
        let logged = log.dump();
        assert!(
            log.lines().len() > 50,
            "the runs logged too little to mean anything: {}",
            log.lines().len()
        );
        assert!(
            texts.len() > 20,
            "the runs sent too little to mean anything"
        );
        let haystack = format!("{logged}\n{}", texts.join("\n"));
        let leaked: Vec<&String> = secrets
            .iter()
            .filter(|s| haystack.contains(s.as_str()))
            .collect();
        assert!(leaked.is_empty(), "{chaos:?}: leaked {leaked:?}");
        checked += secrets.len();
        // The planted secrets are real: the data still holds some of them, and the
        // search would find them (e.g. a surviving user's address).
        let survivor: String = db
            .scalar("SELECT email FROM users ORDER BY id LIMIT 1")
            .await;
        assert!(secrets.contains(&survivor));
    }
    // Configuration never prints the database URL.
    let url = format!("postgres://postgres:{DB_PASSWORD}@db.internal.example/gitlab");
    let config = Config::from_lookup(|k| match k {
        "DATABASE_URL" => Some(url.clone()),
        "SERVICE_NAME" => Some("secrets-test".into()),
        _ => None,
    })
    .unwrap();
    assert!(!format!("{config:?}").contains(DB_PASSWORD));
    let connector = Connector::new(url.parse().unwrap(), &config.database).unwrap();
    assert!(!format!("{connector:?}").contains(DB_PASSWORD));
    eprintln!("secrets checked: {checked} values over two full runs of every batch");
}
