//! No oversized file: a Rust file over 600 lines, in the product (`shared/src`,
//! `checks/src`, `engine/src`, `lab/src`, `cli/src`) or in the tests (`tests/`,
//! `cli/tests/`), is split by concern, or listed with its reason.

use super::*;

#[test]
fn no_source_file_is_oversized() {
    // Over 600 lines, each for a stated reason.
    let allowed: &[(&str, &str)] = &[];
    let mut bad = Vec::new();
    for dir in [
        "shared/src",
        "checks/src",
        "engine/src",
        "lab/src",
        "cli/src",
        "tests",
        "cli/tests",
    ] {
        let files = rust_files(&root().join(dir));
        assert!(!files.is_empty(), "no Rust file read under {dir}");
        for f in files {
            let n = read(&f).lines().count();
            if n > 600 && !allowed.iter().any(|(p, _)| *p == rel(&f)) {
                bad.push(format!("{} ({n} lines)", rel(&f)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "files over 600 lines (split them, or list them here with the reason):\n{}",
        bad.join("\n")
    );
}
