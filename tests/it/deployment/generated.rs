//! The generated regions (infra/gen): `infra/template.yaml`'s per-function resources
//! and stack-wide lists, the contract's function and cron tables (docs/behaviour.md
//! §R3, §9.7) and docs/logs.md's `class` table, are what the function table renders. Run with
//! `HK_REGENERATE=1` to write them (CONTRIBUTING.md, "Adding a cron function").

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn the_generated_regions_are_what_the_function_table_renders() {
    let root = root();
    let files = infra_gen::generate(&root);
    if std::env::var_os("HK_REGENERATE").is_some_and(|v| v == "1") {
        let written = infra_gen::write(&root, &files);
        eprintln!("HK_REGENERATE=1: wrote {written:?}");
        return;
    }
    let stale: Vec<String> = files
        .iter()
        .filter(|g| g.current != g.expected)
        .map(|g| {
            let line = g
                .current
                .lines()
                .zip(g.expected.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| g.current.lines().count().min(g.expected.lines().count()));
            format!(
                "{} (first difference at line {})",
                g.path.display(),
                line + 1
            )
        })
        .collect();
    assert!(
        stale.is_empty(),
        "generated regions are stale in {}: the function table (shared/src/function.rs) or \
         infra/gen changed. Regenerate with `HK_REGENERATE=1 cargo nextest run -p \
         integration-tests --test it -E 'test(/generated/)'` and commit the result",
        stale.join(", ")
    );
}
