//! The jobs' seams with the runtime (issue 48): a job's dependencies are its own
//! typed `Job::Deps`, never an `Option` it unwraps; no message type is written
//! outside the function table (`shared/src/function.rs`): senders address a payload
//! (`messages::Addressed`, `queue::OutMessage::to`) and receivers decode by the row;
//! and GitLab's rules (`shared/src/gitlab/`) return intents, never queue messages: only
//! the jobs send.

use super::*;

/// Every product source file: the workspace less the tests and build output.
fn product_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root()).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name();
        let skip = ["tests", "target", "docs", "infra", "events", "scripts"];
        if p.is_dir()
            && !name.to_string_lossy().starts_with('.')
            && !skip.iter().any(|s| name == *s)
        {
            out.extend(
                rust_files(&p)
                    .into_iter()
                    .filter(|f| !f.components().any(|c| c.as_os_str() == "tests")),
            );
        }
    }
    out.sort();
    out
}

#[test]
fn no_message_type_is_written_outside_the_function_table() {
    let kinds: Vec<&str> = shared::Function::ALL
        .iter()
        .flat_map(|f| f.accepts().iter().copied())
        .collect();
    let table = root().join("shared/src/function.rs");
    let mut bad = Vec::new();
    let files = product_files();
    assert!(
        files.iter().any(|f| f.ends_with("shared/src/job.rs")),
        "scanned the product"
    );
    for f in files.iter().filter(|f| **f != table) {
        for (i, line) in code_only(&read(f)).lines().enumerate() {
            if let Some(k) = kinds.iter().find(|k| line.contains(&format!("\"{k}\""))) {
                bad.push(format!("{}:{}: `{k}`", rel(f), i + 1));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "message types written outside the function table (send with \
         `OutMessage::to`, decode by the row's `accepts()`):\n{}",
        bad.join("\n")
    );
}

/// The fields of `struct <name>` in `file` whose type is an `Option`.
fn option_fields(file: &str, name: &str) -> Vec<String> {
    let text = read(&root().join(file));
    let start = text
        .find(&format!("pub struct {name}"))
        .unwrap_or_else(|| panic!("{file}: no struct {name}"));
    let body = &text[start..];
    let body = &body[..body.find("\n}").expect("struct ends")];
    let field = Regex::new(r"(?m)^\s+pub (\w+): (Option<.*),$").unwrap();
    field
        .captures_iter(body)
        .map(|c| format!("{}: {}", &c[1], &c[2]))
        .collect()
}

#[test]
fn no_job_dependency_is_an_option() {
    // What every run sees: nothing optional but hk's decision recorder (the plan).
    assert_eq!(
        option_fields("shared/src/runtime.rs", "Invocation<'a>"),
        vec!["decisions: Option<&'a dyn Decisions>".to_string()]
    );
    assert_eq!(
        option_fields("shared/src/lambda.rs", "Environment"),
        Vec::<String>::new()
    );
    // Every job names its dependencies, and none is optional.
    let deps = Regex::new(r"(?m)^\s+type Deps = (.+);$").unwrap();
    let mut jobs = 0;
    for dir in ["shared/src/batches", "shared/src/workers"] {
        for f in rust_files(&root().join(dir)) {
            let code = code_only(&read(&f));
            if !code.contains("impl Job for ") {
                continue;
            }
            jobs += 1;
            let ty = deps
                .captures(&code)
                .unwrap_or_else(|| panic!("{}: a job without `type Deps`", rel(&f)));
            assert!(
                !ty[1].contains("Option"),
                "{}: `type Deps = {}`: a job's dependencies are built at cold start, not \
                 optional",
                rel(&f),
                &ty[1]
            );
        }
    }
    assert_eq!(jobs, shared::Function::ALL.len(), "one job per function");
}

#[test]
fn the_domain_returns_intents_and_builds_no_queue_message() {
    let files = rust_files(&root().join("shared/src/gitlab"));
    assert!(
        files.iter().any(|f| f.ends_with("user_removal.rs")),
        "scanned shared/src/gitlab"
    );
    let mut bad = Vec::new();
    for f in &files {
        for (i, line) in code_only(&read(f)).lines().enumerate() {
            for word in [
                "crate::queue",
                "OutMessage",
                "crate::workers",
                "crate::batches",
            ] {
                if line.contains(word) {
                    bad.push(format!("{}:{}: `{word}`", rel(f), i + 1));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "GitLab's rules build queue messages or name a function's payload (return a \
         `gitlab::Intent`; the job sends it):\n{}",
        bad.join("\n")
    );
}
