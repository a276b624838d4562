//! The wire formats of the registry API the client reads (Docker Registry HTTP API
//! V2): the `Link` header of a paginated tag list (kept on the registry's origin: the
//! token goes with every request) and the digests a manifest
//! references (an image manifest's config and layers, a manifest list's or OCI
//! index's child manifests).

/// The `next` target of a `Link: <…>; rel="next"` header.
pub(super) fn next_link(v: &str) -> Option<String> {
    v.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            })
            .then(|| {
                target
                    .trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
    })
}

fn storage(message: String) -> crate::error::Error {
    crate::error::Error::Storage {
        kind: "registry",
        message,
    }
}

/// `u` when it is on `base`'s scheme, host and port (the token goes with every
/// request: a `Link` to another host is refused).
pub(super) fn same_origin(base: &url::Url, u: url::Url) -> crate::error::Result<url::Url> {
    let origin = |x: &url::Url| {
        (
            x.scheme().to_string(),
            x.host_str().map(str::to_ascii_lowercase),
            x.port_or_known_default(),
        )
    };
    if origin(&u) == origin(base) {
        Ok(u)
    } else {
        Err(storage(format!(
            "a pagination Link leaves the registry ({}://{}): refused, the token stays on {}",
            u.scheme(),
            u.host_str().unwrap_or("-"),
            base.host_str().unwrap_or("-")
        )))
    }
}

/// The next page's target of a `Link`: an absolute URL only on `base`'s origin; a path
/// (leading slashes dropped) stays relative to `base`, as the first page's.
pub(super) fn next_target(base: &url::Url, next: &str) -> crate::error::Result<String> {
    match url::Url::parse(next) {
        Ok(abs) => Ok(same_origin(base, abs)?.to_string()),
        Err(_) => Ok(next.trim_start_matches('/').to_string()),
    }
}

/// What a manifest references: blobs (an image manifest's config and layers) and child
/// manifests (a manifest list's or index's `manifests`).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct References {
    pub(super) blobs: Vec<String>,
    pub(super) manifests: Vec<String>,
}

impl References {
    /// Read from a manifest body; a body that is not JSON references nothing.
    pub(super) fn of(body: &[u8]) -> References {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let digests = |list: &serde_json::Value| -> Vec<String> {
            list.as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d["digest"].as_str().map(str::to_string))
                .collect()
        };
        let mut blobs: Vec<String> = v["config"]["digest"]
            .as_str()
            .map(str::to_string)
            .into_iter()
            .collect();
        blobs.extend(digests(&v["layers"]));
        References {
            blobs,
            manifests: digests(&v["manifests"]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_of_an_image_and_an_index() {
        let image = br#"{"schemaVersion":2,"config":{"digest":"sha256:c"},
            "layers":[{"digest":"sha256:l1"},{"digest":"sha256:l2"}]}"#;
        assert_eq!(
            References::of(image),
            References {
                blobs: vec!["sha256:c".into(), "sha256:l1".into(), "sha256:l2".into()],
                manifests: vec![],
            }
        );
        let index =
            br#"{"schemaVersion":2,"manifests":[{"digest":"sha256:a"},{"digest":"sha256:b"}]}"#;
        assert_eq!(
            References::of(index),
            References {
                blobs: vec![],
                manifests: vec!["sha256:a".into(), "sha256:b".into()],
            }
        );
        assert_eq!(References::of(b"not json"), References::default());
    }

    #[test]
    fn link_next_is_parsed() {
        assert_eq!(
            next_link(r#"</v2/a/b/tags/list?last=t1&n=1>; rel="next""#).as_deref(),
            Some("/v2/a/b/tags/list?last=t1&n=1")
        );
        assert_eq!(next_link(r#"</x>; rel="prev""#), None);
    }

    #[test]
    fn a_pagination_link_stays_on_the_registrys_origin() {
        let base = url::Url::parse("http://127.0.0.1:5000/").unwrap();
        assert_eq!(
            next_target(&base, "/v2/g/p/tags/list?last=a&n=1").unwrap(),
            "v2/g/p/tags/list?last=a&n=1"
        );
        assert_eq!(
            next_target(&base, "//evil.example/v2/x").unwrap(),
            "evil.example/v2/x",
            "a path below the registry's own URL"
        );
        assert!(next_target(&base, "http://127.0.0.1:5000/v2/g/p/tags/list?last=a").is_ok());
        for elsewhere in [
            "http://evil.example/v2/g/p/tags/list?last=a",
            "https://127.0.0.1:5000/v2/x",
            "http://127.0.0.1:5001/v2/x",
        ] {
            let e = next_target(&base, elsewhere).unwrap_err().to_string();
            assert!(e.contains("leaves the registry"), "{elsewhere}: {e}");
        }
    }
}
