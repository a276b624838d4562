//! The project's Gitaly proto subset (`shared/proto/gitaly/repository.proto`) against
//! Gitaly's published protos (Debian's golang-gitaly-proto-dev, `HK_GITALY_PROTO_DIR`
//! to override its path), both parsed with protox: every message, field, service and
//! method the subset declares exists in Gitaly's with the same number, type and label.
//!
//! That package (gitaly-proto 1.37) predates `RemoveRepository`: the method and its
//! request and response are listed in [`NEWER_THAN_PACKAGE`] and checked by their wire
//! shape instead (the request is `Repository repository = 1`, like the package's
//! `RepositoryExistsRequest`, which the Gitaly stand-in decodes it with; the response
//! is empty). The test fails when the package starts declaring them, so that they move
//! to the full check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use prost_types::{DescriptorProto, FileDescriptorSet};

const DEBIAN_PROTO_DIR: &str = "/usr/share/gocode/src/gitlab.com/gitlab-org/gitaly-proto";

/// Declared by the subset after current Gitaly's proto/repository.proto, absent from
/// the packaged 1.37 protos.
const NEWER_THAN_PACKAGE: [&str; 3] = [
    "gitaly.RemoveRepositoryRequest",
    "gitaly.RemoveRepositoryResponse",
    "gitaly.RepositoryService.RemoveRepository",
];

fn gitaly_proto_dir() -> PathBuf {
    match std::env::var_os("HK_GITALY_PROTO_DIR") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEBIAN_PROTO_DIR),
    }
}

/// Field name → (number, label, type, type name).
type Fields = BTreeMap<String, (i32, i32, i32, String)>;

struct Api {
    messages: BTreeMap<String, (Fields, Vec<(i32, i32)>)>,
    /// `package.Service.Method` → (input, output, client streaming, server streaming).
    methods: BTreeMap<String, (String, String, bool, bool)>,
    services: Vec<String>,
}

fn api(set: &FileDescriptorSet) -> Api {
    let mut api = Api {
        messages: BTreeMap::new(),
        methods: BTreeMap::new(),
        services: Vec::new(),
    };
    fn add(api: &mut Api, prefix: &str, m: &DescriptorProto) {
        let name = format!("{prefix}.{}", m.name());
        let fields = m
            .field
            .iter()
            .map(|f| {
                let entry = (
                    f.number(),
                    f.label() as i32,
                    f.r#type() as i32,
                    f.type_name().to_string(),
                );
                (f.name().to_string(), entry)
            })
            .collect();
        let reserved = m
            .reserved_range
            .iter()
            .map(|r| (r.start(), r.end()))
            .collect();
        for nested in &m.nested_type {
            add(api, &name, nested);
        }
        api.messages.insert(name, (fields, reserved));
    }
    for file in &set.file {
        let package = file.package().to_string();
        for m in &file.message_type {
            add(&mut api, &package, m);
        }
        for s in &file.service {
            let service = format!("{package}.{}", s.name());
            for m in &s.method {
                api.methods.insert(
                    format!("{service}.{}", m.name()),
                    (
                        m.input_type().to_string(),
                        m.output_type().to_string(),
                        m.client_streaming(),
                        m.server_streaming(),
                    ),
                );
            }
            api.services.push(service);
        }
    }
    api
}

fn compile(files: &[&str], include: &Path) -> FileDescriptorSet {
    protox::compile(files, [include]).unwrap_or_else(|e| {
        panic!(
            "protox cannot parse {files:?} in {}: {e:?}",
            include.display()
        )
    })
}

#[test]
fn the_gitaly_subset_matches_gitalys_published_protos() {
    let subset_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/proto");
    let ours = api(&compile(&["gitaly/repository.proto"], &subset_dir));
    let dir = gitaly_proto_dir();
    assert!(
        dir.join("shared.proto").exists(),
        "Gitaly's protos are not in {}: install Debian's golang-gitaly-proto-dev \
         (scripts/system-packages.sh) or set HK_GITALY_PROTO_DIR",
        dir.display()
    );
    let theirs = api(&compile(
        &["shared.proto", "repository-service.proto"],
        &dir,
    ));

    let mut checked = 0;
    for (name, (fields, reserved)) in &ours.messages {
        let Some((their_fields, their_reserved)) = theirs.messages.get(name) else {
            assert!(
                NEWER_THAN_PACKAGE.contains(&name.as_str()),
                "{name} is not Gitaly's"
            );
            continue;
        };
        for (field, ours) in fields {
            assert_eq!(their_fields.get(field), Some(ours), "{name}.{field}");
            checked += 1;
        }
        for range in reserved {
            assert!(their_reserved.contains(range), "{name}: reserved {range:?}");
        }
    }
    for service in &ours.services {
        assert!(
            theirs.services.contains(service),
            "{service} is not Gitaly's"
        );
    }
    for (method, shape) in &ours.methods {
        match theirs.methods.get(method) {
            Some(theirs) => assert_eq!(theirs, shape, "{method}"),
            None => assert!(NEWER_THAN_PACKAGE.contains(&method.as_str()), "{method}"),
        }
    }
    // Repository's four fields at least, by name, number, type and label.
    assert!(checked >= 4, "only {checked} fields compared");

    // What the package does not declare: present in ours, absent in theirs, and
    // shaped as current Gitaly declares it.
    for name in NEWER_THAN_PACKAGE {
        let declared = ours.messages.contains_key(name) || ours.methods.contains_key(name);
        assert!(declared, "{name} not in the subset");
        let packaged = theirs.messages.contains_key(name) || theirs.methods.contains_key(name);
        assert!(
            !packaged,
            "{name} is now packaged: check it like the others"
        );
    }
    let method = &ours.methods["gitaly.RepositoryService.RemoveRepository"];
    let unary = (
        ".gitaly.RemoveRepositoryRequest".to_string(),
        ".gitaly.RemoveRepositoryResponse".to_string(),
        false,
        false,
    );
    assert_eq!(method, &unary);
    let request = &ours.messages["gitaly.RemoveRepositoryRequest"].0;
    let twin = &theirs.messages["gitaly.RepositoryExistsRequest"].0;
    assert_eq!(
        request, twin,
        "RemoveRepositoryRequest is Repository repository = 1"
    );
    assert!(ours.messages["gitaly.RemoveRepositoryResponse"]
        .0
        .is_empty());
}
