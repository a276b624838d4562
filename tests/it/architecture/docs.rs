//! Citations: every `behaviour §…` citation in the repository resolves to a section of
//! docs/behaviour.md, and none cites a document outside the repository.

use super::*;

/// Every tracked text file a citation can live in.
fn doc_and_code_files() -> Vec<PathBuf> {
    let r = root();
    let skip = [
        "target",
        ".git",
        ".venv",
        ".venv-sam",
        ".venv-checkov",
        "node_modules",
        ".aws-sam",
        ".dev",
    ];
    let exts = ["rs", "md", "sh", "yaml", "yml", "toml", "sql", "txt"];
    let mut out = Vec::new();
    let mut stack = vec![r.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                if !skip.contains(&name.as_str()) && !name.starts_with(".pg") {
                    stack.push(p);
                }
            } else if p
                .extension()
                .is_some_and(|x| exts.contains(&x.to_string_lossy().as_ref()))
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_behaviour_citation_resolves_and_no_citation_leaves_the_repository() {
    let r = root();
    let doc = read(&r.join("docs/behaviour.md"));
    let anchor = Regex::new(r#"<a id="([a-z0-9.]+)"></a>"#).unwrap();
    let anchors: BTreeSet<String> = anchor
        .captures_iter(&doc)
        .map(|c| c[1].to_string())
        .collect();
    assert!(
        anchors.len() > 50,
        "docs/behaviour.md has {} anchors",
        anchors.len()
    );
    let token = Regex::new(
        r"§(B(?:28|38|43|51|70)(?:\.[0-9]+)*|D[0-9]+|S(?:[0-9]+(?:\.[0-9]+)*)?|R[0-9]+|[0-9]+(?:\.[0-9]+)*)",
    )
    .unwrap();
    let old = Regex::new(
        r"⚑|\b(?:common|schema)\.md|\b(?:b28-pat-expiring|b38-remove-expired-members|b43-prune-deletions|b51-adjourned-group-deletion|b70-placeholder-user-cleanup)\.md|shared/(?:spec|seeds|guides)\b",
    )
    .unwrap();
    let mut bad = Vec::new();
    for f in doc_and_code_files() {
        if rel(&f) == "tests/it/architecture/docs.rs" {
            continue;
        }
        let text = read(&f);
        for (i, line) in text.lines().enumerate() {
            for c in token.captures_iter(line) {
                let id = c[1].trim_end_matches('.');
                let a = if id.starts_with(|ch: char| ch.is_ascii_digit()) {
                    format!("c{id}")
                } else {
                    id.to_lowercase()
                };
                if !anchors.contains(&a) {
                    bad.push(format!(
                        "{}:{}: §{id} has no section in docs/behaviour.md",
                        rel(&f),
                        i + 1
                    ));
                }
            }
            if old.is_match(line) {
                bad.push(format!(
                    "{}:{}: cites a document outside the repository: {}",
                    rel(&f),
                    i + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
