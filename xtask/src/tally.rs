//! The tally of a whole `cargo test --no-fail-fast` run: every test binary runs, and at the
//! end one summary says how many tests passed and failed in all, which tests failed, and which
//! test binaries failed without reporting a result (a crash, a timeout, a binary that would not
//! start).
//!
//! It reads what cargo and libtest print, line by line, as the lines pass through to the
//! screen: libtest's `test result: ok. 12 passed; 0 failed; 3 ignored; ...` per binary and
//! `test NAME ... FAILED` per failed test on stdout, cargo's `Running ...` and
//! `error: test failed, to rerun pass ...` on stderr. The Python package's tests (pytest) are
//! read by [`Tally::read_pytest_line`]: its closing `== 3 passed, 1 failed in 2.01s ==` and
//! the `FAILED path::test - ...` lines of its short summary. Not a test runner: cargo and
//! pytest run the tests, and their exit statuses stay the verdict.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};

/// Counts over every test binary of one run.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    /// Binaries (and doc-test runs) that printed a `test result:` line.
    pub binaries: u64,
    /// `test NAME ... FAILED`, in the order seen.
    pub failed_tests: Vec<String>,
    /// What cargo said to re-run each failed binary with (`-p glassbox --test e2e`).
    pub failed_binaries: Vec<String>,
}

impl Tally {
    /// Reads one line of libtest's or cargo's output.
    pub fn read_line(&mut self, line: &str) {
        let line = line.trim_end();
        if let Some(rest) = line
            .strip_prefix("test result: ")
            .filter(|r| r.starts_with("ok.") || r.starts_with("FAILED."))
        {
            self.binaries += 1;
            for part in rest.split(';') {
                // "ok. 12 passed", " 0 failed", " 3 ignored", ...
                let part = part.rsplit(". ").next().unwrap_or(part).trim();
                let mut words = part.split_whitespace();
                let (Some(n), Some(what)) = (words.next(), words.next()) else {
                    continue;
                };
                let Ok(n) = n.parse::<u64>() else { continue };
                match what {
                    "passed" => self.passed += n,
                    "failed" => self.failed += n,
                    "ignored" => self.ignored += n,
                    _ => {}
                }
            }
        } else if let Some(name) = line
            .strip_prefix("test ")
            .and_then(|l| l.strip_suffix(" ... FAILED"))
        {
            self.failed_tests.push(name.to_string());
        } else if let Some(rest) = line
            .trim_start()
            .strip_prefix("error: test failed, to rerun pass ")
        {
            self.failed_binaries
                .push(rest.trim_matches('`').to_string());
        }
    }

    /// Reads one line of pytest's output (run with `-rfE`): its closing counts line counts as
    /// one more binary (errors count as failures, `xfailed` as skipped), and each `FAILED` or
    /// `ERROR` line of the short summary names a failed test.
    pub fn read_pytest_line(&mut self, line: &str) {
        let line = line.trim();
        if let Some(rest) = line
            .strip_prefix("FAILED ")
            .or_else(|| line.strip_prefix("ERROR "))
        {
            let name = rest.split(" - ").next().unwrap_or(rest);
            self.failed_tests.push(name.to_string());
            return;
        }
        // `==== 2 failed, 30 passed, 1 skipped in 12.34s (0:00:12) ====`
        let body = line.trim_matches(|c| c == '=' || c == ' ');
        let Some((counts, time)) = body.rsplit_once(" in ") else {
            return;
        };
        let seconds = time.split_whitespace().next().unwrap_or("");
        if seconds
            .strip_suffix('s')
            .is_none_or(|n| n.parse::<f64>().is_err())
        {
            return;
        }
        let mut parts = Vec::new();
        for part in counts.split(", ") {
            let mut words = part.split_whitespace();
            match (
                words.next().map(str::parse::<u64>),
                words.next(),
                words.next(),
            ) {
                (Some(Ok(n)), Some(what), None) => parts.push((n, what)),
                _ if counts == "no tests ran" => {}
                _ => return,
            }
        }
        self.binaries += 1;
        for (n, what) in parts {
            match what {
                "passed" | "xpassed" => self.passed += n,
                "failed" | "error" | "errors" => self.failed += n,
                "skipped" | "xfailed" => self.ignored += n,
                _ => {}
            }
        }
    }

    /// The closing line: `tests: N passed, N failed` (`, N skipped` when some were ignored),
    /// alone on its line so that any reader of test logs finds it.
    pub fn summary_line(&self) -> String {
        let mut line = format!("tests: {} passed, {} failed", self.passed, self.failed);
        if self.ignored > 0 {
            line.push_str(&format!(", {} skipped", self.ignored));
        }
        line
    }

    /// The whole report, for the end of the run.
    pub fn report(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "xtask: {} test binaries and doc-test runs reported\n",
            self.binaries
        ));
        if !self.failed_tests.is_empty() {
            out.push_str("xtask: failed tests:\n");
            for t in &self.failed_tests {
                out.push_str(&format!("  - {t}\n"));
            }
        }
        if !self.failed_binaries.is_empty() {
            out.push_str(
                "xtask: failed test binaries (re-run one with `cargo xtask test ARGS`):\n",
            );
            for b in &self.failed_binaries {
                out.push_str(&format!("  - {b}\n"));
            }
        }
        out.push_str(&self.summary_line());
        out.push('\n');
        out
    }
}

/// Copies `from` to `to` line by line, reading each line into `tally` with `read`
/// ([`Tally::read_line`] for cargo's output, [`Tally::read_pytest_line`] for pytest's).
/// Returns when `from` closes. Bytes that are not UTF-8 pass through unchanged and are read
/// lossily.
pub fn pass_through_with(
    from: impl Read,
    mut to: impl Write,
    tally: &Arc<Mutex<Tally>>,
    read: fn(&mut Tally, &str),
) {
    let mut reader = BufReader::new(from);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let _ = to.write_all(&buf);
                let _ = to.flush();
                if let Ok(mut t) = tally.lock() {
                    read(&mut t, &String::from_utf8_lossy(&buf));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\
running 3 tests
test a::one ... ok
test a::two ... FAILED
test a::three ... ignored

failures:

---- a::two stdout ----
thread 'a::two' panicked at src/a.rs:3:5:
test result: this is a test's own output, not libtest's line
failures:
    a::two

test result: FAILED. 1 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s

     Running tests/it/main.rs (target/debug/deps/it-0123)
running 2 tests
test b::x ... ok
test b::y ... ok

test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.20s

error: test failed, to rerun pass `-p glassbox-lab --lib`
error: test failed, to rerun pass `-p glassbox --test e2e`
";

    #[test]
    fn adds_every_binary_and_names_what_failed() {
        let mut t = Tally::default();
        for line in RUN.lines() {
            t.read_line(line);
        }
        // A test's own output that starts like libtest's line but not with its verdict is
        // not counted as a binary.
        assert_eq!((t.passed, t.failed, t.ignored, t.binaries), (3, 1, 1, 2));
        assert_eq!(t.failed_tests, vec!["a::two".to_string()]);
        assert_eq!(
            t.failed_binaries,
            vec![
                "-p glassbox-lab --lib".to_string(),
                "-p glassbox --test e2e".to_string()
            ]
        );
        assert_eq!(t.summary_line(), "tests: 3 passed, 1 failed, 1 skipped");
        assert!(
            t.report()
                .ends_with("tests: 3 passed, 1 failed, 1 skipped\n")
        );
    }

    #[test]
    fn a_clean_run_says_none_failed() {
        let mut t = Tally::default();
        t.read_line("test result: ok. 575 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 3.00s");
        assert_eq!(t.summary_line(), "tests: 575 passed, 0 failed");
        assert!(t.failed_tests.is_empty() && t.failed_binaries.is_empty());
    }

    #[test]
    fn pytest_counts_add_to_the_cargo_tests() {
        let mut t = Tally::default();
        t.read_line("test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 3.00s");
        for line in [
            "python/tests/test_lab.py ..F.s                                     [100%]",
            "FAILED python/tests/test_lab.py::test_summary - AssertionError: assert 1 == 2",
            "ERROR python/tests/test_lab.py::test_big - RuntimeError: no fixture",
            "===== 1 failed, 3 passed, 1 skipped, 1 error, 2 warnings in 12.34s (0:00:12) =====",
            // A test's own output that merely ends like the counts line is not counted.
            "waited in 3s",
        ] {
            t.read_pytest_line(line);
        }
        assert_eq!((t.passed, t.failed, t.ignored, t.binaries), (8, 2, 1, 2));
        assert_eq!(
            t.failed_tests,
            [
                "python/tests/test_lab.py::test_summary",
                "python/tests/test_lab.py::test_big"
            ]
        );
        let mut quiet = Tally::default();
        quiet.read_pytest_line("24 passed in 3.10s");
        quiet.read_pytest_line("no tests ran in 0.01s");
        assert_eq!((quiet.passed, quiet.binaries), (24, 2));
    }

    #[test]
    fn lines_pass_through_unchanged() {
        let tally = Arc::new(Mutex::new(Tally::default()));
        let mut out = Vec::new();
        let input = b"test result: ok. 2 passed; 0 failed; 0 ignored\n\xff raw bytes\nno newline";
        pass_through_with(&input[..], &mut out, &tally, Tally::read_line);
        assert_eq!(out, input);
        assert_eq!(tally.lock().unwrap().passed, 2);
    }
}
