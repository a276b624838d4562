//! B28's delivery rules without a server: the emails as rendered and written, the
//! `Message-ID`s, the instance, the web-hook target and back-off rules, and GitLab's
//! `db_key_base` encryption of hook URLs.

use std::net::IpAddr;

use chrono::{DateTime, Utc};
use shared::notify::crypto::{
    decode_m, derive_key, encode_m, encrypt, encrypt_with_iv, DecryptError, KeyRing,
};
use shared::notify::mail::{message_id, one_line, Mailer, SendOutcome};
use shared::notify::webhook::{is_local_network, parse_target, HookState, Refusal};
use shared::notify::Instance;
use shared::workers::deliver_notification::{render, EmailNotification, ResourceType};

#[test]
fn the_instance_defaults_its_ssh_prefix_to_the_base_host() {
    let i = Instance::new("https://gitlab.example.com/", None, "18.0.0").unwrap();
    assert_eq!(i.base_url, "https://gitlab.example.com");
    assert_eq!(i.host, "gitlab.example.com");
    assert_eq!(i.ssh_url_prefix, "git@gitlab.example.com:");
    let i = Instance::new(
        "http://gl.local:8080",
        Some("ssh://git@gl.local:2222/"),
        "17.9",
    )
    .unwrap();
    assert_eq!(i.ssh_url_prefix, "ssh://git@gl.local:2222/");
    assert_eq!(i.host, "gl.local");
}

fn instance() -> Instance {
    Instance::new("https://gitlab.example.com", None, "18.0.0").unwrap()
}
#[test]
fn the_human_email_names_every_token_and_the_settings_page() {
    let n = EmailNotification::AccessTokenAboutToExpire {
        recipient_user_id: 10,
        days_to_expire: 7,
        token_names: vec!["deploy".into(), "ci".into()],
    };
    let r = render(&n, "Ada", &instance());
    assert_eq!(
        r.subject,
        "Your personal access tokens will expire in 7 days or less"
    );
    assert!(r.body.starts_with("Hi Ada!\n"));
    assert!(r.body.contains("expire in 7 days or less"));
    assert!(r.body.contains("\n- deploy\n- ci\n"));
    assert!(r
        .body
        .contains("https://gitlab.example.com/-/user_settings/personal_access_tokens"));
}
#[test]
fn the_bot_email_links_the_project_or_group_token_settings() {
    let mut n = EmailNotification::BotResourceAccessTokenAboutToExpire {
        recipient_user_id: 11,
        days_to_expire: 30,
        bot_user_id: 20,
        token_name: "T20".into(),
        resource_type: ResourceType::Project,
        resource_id: 200,
        resource_full_path: "acme/web/site".into(),
        resource_name: "site".into(),
    };
    let r = render(&n, "Bo", &instance());
    assert_eq!(
        r.subject,
        "Your resource access tokens will expire in 30 days or less"
    );
    assert!(r.body.contains(
        "The access token 'T20' of the project 'acme/web/site' expires in 30 days or less."
    ));
    assert!(r
        .body
        .contains("https://gitlab.example.com/acme/web/site/-/settings/access_tokens"));
    if let EmailNotification::BotResourceAccessTokenAboutToExpire {
        resource_type,
        resource_full_path,
        ..
    } = &mut n
    {
        *resource_type = ResourceType::Group;
        *resource_full_path = "acme/web".into();
    }
    let r = render(&n, "Bo", &instance());
    assert!(r.body.contains("of the group 'acme/web'"));
    assert!(r
        .body
        .contains("https://gitlab.example.com/groups/acme/web/-/settings/access_tokens"));
}
#[test]
fn message_ids_are_stable_per_key_and_name_the_instance_host() {
    let a = message_id("pat-expiring:seven_days:user:10:2025-03-10", &instance());
    assert_eq!(
        a,
        message_id("pat-expiring:seven_days:user:10:2025-03-10", &instance())
    );
    assert_ne!(
        a,
        message_id("pat-expiring:seven_days:user:11:2025-03-10", &instance())
    );
    let (hash, host) = a.split_once('@').unwrap();
    assert_eq!(hash.len(), 32);
    assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(host, "gitlab.example.com");
}
#[test]
fn one_line_removes_every_control_and_line_separator_and_keeps_non_ascii() {
    assert_eq!(one_line("Eve\nSubject: x"), "Eve Subject: x");
    assert_eq!(one_line("Eve\r"), "Eve");
    assert_eq!(one_line("\0Eve\0\0Adams\0"), "Eve Adams");
    assert_eq!(one_line("a\u{2028}b\u{2029}c\u{85}d\u{7f}e"), "a b c d e");
    assert_eq!(one_line("Zoë  山田\t😀"), "Zoë 山田 😀");
    assert_eq!(one_line("\r\n\t"), "");
}
#[tokio::test]
async fn hostile_display_names_and_token_names_build_a_well_formed_email() {
    let dir = std::env::temp_dir().join(format!("hk-mail-{}", std::process::id()));
    let mailer = Mailer::File(dir.clone());
    let names = [
        "Eve\nSubject: x".to_string(),
        "Eve\rBcc: m@example.com".to_string(),
        "Eve\0Null".to_string(),
        "\r\n".to_string(),
        "Zoë 山田 😀".to_string(),
        "x".repeat(1500),
        "é ".repeat(800),
    ];
    for (i, name) in names.iter().enumerate() {
        let n = EmailNotification::AccessTokenAboutToExpire {
            recipient_user_id: 10,
            days_to_expire: 7,
            token_names: vec![format!("tok\r\nBcc: x{i}")],
        };
        let r = render(&n, name, &instance());
        assert!(!r.body.contains('\r') && !r.body.contains('\0'));
        let id = format!("m{i}");
        let out = mailer
            .send(
                "gitlab@gitlab.example.com",
                "eve@example.com",
                name,
                &r,
                &id,
                10,
                "t",
            )
            .await
            .unwrap();
        assert_eq!(out, SendOutcome::Accepted, "{name:?}");
        let eml = std::fs::read_to_string(dir.join(format!("{id}.eml"))).unwrap();
        let head = eml.split("\r\n\r\n").next().unwrap();
        for line in head.split("\r\n") {
            assert!(line.len() <= 998, "{name:?}: {}", line.len());
            assert!(!line.starts_with("Bcc") && !line.contains('\0'), "{name:?}");
        }
        assert_eq!(head.matches("\r\nSubject:").count(), 1, "{name:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn local_private_link_local_and_metadata_ranges_are_refused() {
    for s in [
        "0.0.0.0",
        "10.1.2.3",
        "100.64.0.1",
        "100.127.255.255",
        "127.0.0.1",
        "169.254.169.254",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "::",
        "::1",
        "fc00::1",
        "fd12:3456::1",
        "fe80::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "::ffff:10.0.0.1",
    ] {
        assert!(is_local_network(ip(s)), "{s} must be refused");
    }
    for s in [
        "1.1.1.1",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "203.0.113.10",
        "223.255.255.255",
        "2001:db8::1",
        "2606:4700::1111",
        "::ffff:8.8.8.8",
    ] {
        assert!(!is_local_network(ip(s)), "{s} must be allowed");
    }
}

#[test]
fn only_http_and_https_urls_with_a_host_are_targets() {
    let t = parse_target("https://hooks.example.com/x?a=1").unwrap();
    assert!(t.https);
    assert_eq!((t.host.as_str(), t.port), ("hooks.example.com", 443));
    assert_eq!(t.path_and_query, "/x?a=1");
    assert_eq!(t.host_header, "hooks.example.com");
    assert_eq!(t.literal, None);
    let t = parse_target("http://[::1]:8080").unwrap();
    assert_eq!(t.literal, Some(ip("::1")));
    assert_eq!(t.host_header, "[::1]:8080");
    assert_eq!(t.path_and_query, "/");
    for bad in [
        "ftp://example.com/",
        "file:///etc/passwd",
        "not a url",
        "http://",
    ] {
        assert_eq!(parse_target(bad), Err(Refusal::InvalidUrl), "{bad}");
    }
}

#[test]
fn failures_back_off_after_three_and_disable_for_good_after_forty() {
    let now: DateTime<Utc> = "2025-03-10T01:00:00Z".parse().unwrap();
    let s = |f: i16, d: Option<i64>| HookState {
        recent_failures: f,
        disabled_until: d.map(|s| now + chrono::Duration::seconds(s)),
    };
    assert_eq!(s(0, None).after_failure(now), Some(s(1, None)));
    assert_eq!(s(2, None).after_failure(now), Some(s(3, None)));
    assert_eq!(s(3, None).after_failure(now), Some(s(4, Some(60))));
    assert_eq!(s(4, Some(-1)).after_failure(now), Some(s(5, Some(120))));
    assert_eq!(
        s(13, Some(-1)).after_failure(now),
        Some(s(14, Some(61_440)))
    );
    assert_eq!(
        s(20, Some(-1)).after_failure(now),
        Some(s(21, Some(86_400)))
    );
    assert_eq!(
        s(39, Some(-1)).after_failure(now),
        Some(s(40, Some(86_400)))
    );
    // Not executable: nothing changes.
    assert_eq!(s(40, Some(-1)).after_failure(now), None);
    assert_eq!(s(5, Some(3600)).after_failure(now), None);
    assert_eq!(s(4, None).after_failure(now), None);
    assert!(s(5, Some(0)).temporarily_disabled(now));
    assert!(s(5, Some(-1)).executable(now));
    assert!(s(4, None).permanently_disabled());
    assert!(s(3, None).executable(now));
    assert_eq!(s(2, None).after_success(), Some(s(0, None)));
    assert_eq!(s(0, Some(-5)).after_success(), Some(s(0, None)));
    assert_eq!(s(0, None).after_success(), None);
}

const KEY: &str = "a3f1c0de9b8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a392817065f4e3d2c1b0a9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4";

#[test]
fn the_key_is_the_first_32_bytes_padded_with_ascii_zeros() {
    assert_eq!(&derive_key(KEY), &KEY.as_bytes()[..32]);
    assert_eq!(&derive_key("short"), b"short000000000000000000000000000");
    // A multi-byte character that would cross byte 32 is dropped, then padded.
    let k = format!("{}é", "x".repeat(31));
    assert_eq!(&derive_key(&k), format!("{}0", "x".repeat(31)).as_bytes());
}

#[test]
fn pack_m_wraps_at_60_characters_with_a_trailing_newline() {
    assert_eq!(encode_m(b""), "");
    assert_eq!(encode_m(b"abc"), "YWJj\n");
    let long = encode_m(&[7u8; 100]);
    let lines: Vec<&str> = long.split_terminator('\n').collect();
    assert_eq!(lines[0].len(), 60);
    assert_eq!((lines[1].len(), lines[2].len(), lines.len()), (60, 16, 3));
    assert!(long.ends_with('\n'));
    assert_eq!(decode_m(&long).unwrap(), vec![7u8; 100]);
    assert_eq!(decode_m(" YW\r\nJj \n").unwrap(), b"abc");
    assert!(decode_m("not base64!").is_none());
}

#[test]
fn values_round_trip_and_only_the_right_key_opens_them() {
    let url = "https://hooks.example.com/x?secret=1";
    let (v, iv) = encrypt(url, KEY);
    assert_eq!(decode_m(&iv).unwrap().len(), 12);
    // Ciphertext plus the 16-byte tag.
    assert_eq!(decode_m(&v).unwrap().len(), url.len() + 16);
    assert_eq!(KeyRing::from_list(KEY).decrypt(&v, &iv).unwrap(), url);
    // Several keys are tried in order: an old one first still works.
    let ring = KeyRing::from_list(&format!("{}, {KEY}", "f".repeat(128)));
    assert_eq!(ring.decrypt(&v, &iv).unwrap(), url);
    assert_eq!(
        KeyRing::from_list(&"f".repeat(128)).decrypt(&v, &iv),
        Err(DecryptError::WrongKey)
    );
    assert_eq!(
        KeyRing::from_list("").decrypt(&v, &iv),
        Err(DecryptError::NoKey)
    );
    assert_eq!(
        KeyRing::from_list(KEY).decrypt(&v, "AAAA\n"),
        Err(DecryptError::Malformed)
    );
    // A fixed IV gives a fixed value (demo data), and tampering is detected.
    let (a, _) = encrypt_with_iv("s3cr3t", KEY, [1; 12]);
    let (b, ivb) = encrypt_with_iv("s3cr3t", KEY, [1; 12]);
    assert_eq!(a, b);
    let mut raw = decode_m(&a).unwrap();
    raw[0] ^= 1;
    assert_eq!(
        KeyRing::from_list(KEY).decrypt(&encode_m(&raw), &ivb),
        Err(DecryptError::WrongKey)
    );
    assert!(!format!("{:?}", KeyRing::from_list(KEY)).contains(&KEY[..8]));
}
