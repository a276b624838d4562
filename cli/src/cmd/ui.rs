//! What `hk` shows people and machines beside the result: progress on a terminal
//! (indicatif, on stderr, never with `--json` or when stderr is not a terminal) and
//! tables (comfy-table; colour only on a terminal and without `NO_COLOR`, numbers
//! right-aligned). The decisions are plain functions, tested on their own.

use std::borrow::Cow;
use std::io::IsTerminal;
use std::time::Duration;

use comfy_table::{presets, Attribute, Cell, CellAlignment, ContentArrangement, Table};
use indicatif::{ProgressBar, ProgressStyle};

use engine::local::Run;

/// Progress is drawn only for a person watching: stderr is a terminal and the
/// output is not meant for a program (`--json`).
pub(crate) fn show_progress(stderr_is_terminal: bool, json: bool) -> bool {
    stderr_is_terminal && !json
}

/// Colour only on a terminal, and never when `NO_COLOR` is set to anything but the
/// empty string (no-color.org).
pub(crate) fn use_colour(stdout_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stdout_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// A spinner with the elapsed time and `msg`, or a hidden bar (draws nothing) when
/// [`show_progress`] says no.
pub(crate) fn progress(json: bool, msg: impl Into<Cow<'static, str>>) -> ProgressBar {
    if !show_progress(std::io::stderr().is_terminal(), json) {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
            .expect("a valid template"),
    );
    pb.enable_steady_tick(Duration::from_millis(120));
    pb.set_message(msg);
    pb
}

/// The copy's bar of `--read-only` (rows of the estimate): on a terminal only, never
/// with `--json` (whose copy counts are lines on stderr and the plan's `read_only`).
pub(crate) fn copy_progress(json: bool, rows: u64) -> ProgressBar {
    if !show_progress(std::io::stderr().is_terminal(), json) {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(rows.max(1));
    pb.set_style(
        ProgressStyle::with_template("copy [{elapsed_precise}] {bar:30} {pos}/~{len} rows {msg}")
            .expect("a valid template"),
    );
    pb
}

/// Running totals of a local run, for the progress line.
#[derive(Default)]
pub(crate) struct RunTally {
    pub(crate) runs: u64,
    pub(crate) messages_sent: u64,
    pub(crate) items: u64,
    pub(crate) failed: u64,
}

impl RunTally {
    /// Count one ended run and describe the totals, with its virtual time.
    pub(crate) fn add(&mut self, r: &Run) -> String {
        self.runs += 1;
        self.messages_sent += r.sent.len() as u64;
        if let Some(rep) = &r.report {
            self.items += rep.counts().iter().map(|(_, n)| *n).sum::<u64>();
        }
        if r.outcome != "success" {
            self.failed += 1;
        }
        format!(
            "{} runs, {} messages sent, {} items, {} failed; last {} at {} (virtual)",
            self.runs,
            self.messages_sent,
            self.items,
            self.failed,
            r.function.name(),
            shared::clock::rfc3339(r.now)
        )
    }
}

/// Keep the progress bar's line updated with every run a [`engine::local::Runner`] ends.
pub(crate) fn observe(pb: &ProgressBar) -> impl FnMut(&Run) + Send + 'static {
    let pb = pb.clone();
    let mut tally = RunTally::default();
    move |r: &Run| pb.set_message(tally.add(r))
}

/// A table for people: no borders (each row starts with its first column, so
/// `grep '^name'` works), a bold header only when colour is allowed, and the columns
/// in `right` (numbers) right-aligned.
pub(crate) fn table(header: &[&str], right: &[usize]) -> Table {
    let colour = use_colour(
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled);
    if colour {
        t.enforce_styling();
    } else {
        t.force_no_tty();
    }
    t.set_header(header.iter().map(|h| {
        let c = Cell::new(h);
        if colour {
            c.add_attribute(Attribute::Bold)
        } else {
            c
        }
    }));
    for (i, col) in t.column_iter_mut().enumerate() {
        col.set_padding((0, 2));
        if right.contains(&i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// The table as text, without the blanks that pad the last column.
pub(crate) fn render(t: &Table) -> String {
    t.lines()
        .map(|l| l.trim_end().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A number cell.
pub(crate) fn num(n: impl ToString) -> Cell {
    Cell::new(n).set_alignment(CellAlignment::Right)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_only_on_a_terminal_and_never_with_json() {
        assert!(show_progress(true, false));
        assert!(!show_progress(false, false), "piped: no progress");
        assert!(!show_progress(true, true), "--json: no progress");
        assert!(!show_progress(false, true));
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(use_colour(true, None));
        assert!(
            use_colour(true, Some(OsStr::new(""))),
            "empty NO_COLOR is unset"
        );
        assert!(!use_colour(true, Some(OsStr::new("1"))));
        assert!(!use_colour(false, None));
    }

    #[test]
    fn tables_put_the_first_column_first_and_numbers_right() {
        let mut t = table(&["function", "runs"], &[1]);
        t.add_row(vec![Cell::new("delete-user"), num(7)]);
        t.add_row(vec![Cell::new("group-destroy"), num(12)]);
        let s = render(&t);
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines.iter().any(|l| l.starts_with("delete-user ")), "{s}");
        // Right-aligned: the numbers end in the same column.
        let ends: Vec<usize> = lines
            .iter()
            .filter(|l| l.starts_with("delete-user") || l.starts_with("group-destroy"))
            .map(|l| l.trim_end().len())
            .collect();
        assert_eq!(ends[0], ends[1], "{s}");
        assert!(
            !s.contains('\u{1b}'),
            "no colour when not a terminal: {s:?}"
        );
    }
}
