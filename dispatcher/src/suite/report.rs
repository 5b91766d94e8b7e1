//! The reports of a test run, pure: the table printed on stdout and JUnit XML (one
//! `testsuite` per file, one `testcase` per case, a `failure` with the differences or an
//! `error` with the reason).

use std::fmt::Write;

use super::run::{CaseOutcome, CaseResult};

/// The results of one test file.
#[derive(Debug, Clone)]
pub struct FileResults {
    /// The file's path as shown (the `FILE` column, the testsuite's name).
    pub path: String,
    /// Its `metadata.name` (else its path): the testcases' `classname`.
    pub name: String,
    pub cases: Vec<CaseResult>,
}

/// Counts of a run or of one file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub cases: usize,
    pub passed: usize,
    pub failed: usize,
    pub errors: usize,
}

impl Counts {
    /// The counts of `cases`.
    pub fn of<'a>(cases: impl IntoIterator<Item = &'a CaseResult>) -> Counts {
        let mut c = Counts::default();
        for r in cases {
            c.cases += 1;
            match r.outcome {
                CaseOutcome::Pass => c.passed += 1,
                CaseOutcome::Fail(_) => c.failed += 1,
                CaseOutcome::Error(_) => c.errors += 1,
            }
        }
        c
    }

    /// Whether every case passed.
    pub fn all_passed(&self) -> bool {
        self.failed == 0 && self.errors == 0
    }
}

fn result_word(o: &CaseOutcome) -> &'static str {
    match o {
        CaseOutcome::Pass => "pass",
        CaseOutcome::Fail(_) => "FAIL",
        CaseOutcome::Error(_) => "ERROR",
    }
}

/// The table: `FILE  CASE  EXPECTED  GOT  RESULT`, one row per case, columns padded to
/// their widest cell; under a failed case one line per difference, under an error its
/// reason; then a summary line (`9 cases in 1 file: 8 passed, 1 failed, 0 errors`).
pub fn table(files: &[FileResults]) -> String {
    let header = ["FILE", "CASE", "EXPECTED", "GOT", "RESULT"];
    let mut rows: Vec<([String; 5], Vec<String>)> = Vec::new();
    for f in files {
        for c in &f.cases {
            let got = match c.outcome {
                CaseOutcome::Error(_) => "-".to_string(),
                _ => c.got.decision.as_str().to_string(),
            };
            let notes = match &c.outcome {
                CaseOutcome::Pass => Vec::new(),
                CaseOutcome::Fail(d) => d.clone(),
                CaseOutcome::Error(e) => vec![e.clone()],
            };
            rows.push((
                [
                    f.path.clone(),
                    c.name.clone(),
                    c.expected.as_str().to_string(),
                    got,
                    result_word(&c.outcome).to_string(),
                ],
                notes,
            ));
        }
    }
    let mut widths = header.map(|h| h.chars().count());
    for (cells, _) in &rows {
        for (w, cell) in widths.iter_mut().zip(cells) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &[&str]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                let pad = w - cell.chars().count();
                let _ = write!(s, "{cell}{}  ", " ".repeat(pad));
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&mut out, &header);
    for (cells, notes) in &rows {
        line(&mut out, &cells.each_ref().map(String::as_str));
        for n in notes {
            let _ = writeln!(out, "    {n}");
        }
    }
    let total = Counts::of(files.iter().flat_map(|f| &f.cases));
    let _ = writeln!(
        out,
        "{} {} in {} {}: {} passed, {} failed, {} {}",
        total.cases,
        plural(total.cases, "case", "cases"),
        files.len(),
        plural(files.len(), "file", "files"),
        total.passed,
        total.failed,
        total.errors,
        plural(total.errors, "error", "errors"),
    );
    out
}

fn plural(n: usize, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

/// JUnit XML of the run (the schema CI systems read: GitLab, Jenkins, GitHub actions
/// that publish test reports): `<testsuites>` with one `<testsuite name=FILE>` per file
/// and one `<testcase name=CASE classname=metadata.name>` per case; a mismatch is a
/// `<failure type="mismatch">` whose `message` is the first difference and whose text is
/// all of them, a case that could not be decided an `<error>`. Times in seconds.
pub fn junit(files: &[FileResults]) -> String {
    let total = Counts::of(files.iter().flat_map(|f| &f.cases));
    let seconds =
        |cases: &[CaseResult]| -> f64 { cases.iter().map(|c| c.elapsed.as_secs_f64()).sum() };
    let all: f64 = files.iter().map(|f| seconds(&f.cases)).sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"agenthooks-dispatcher test\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{all:.6}\">",
        total.cases, total.failed, total.errors
    );
    for f in files {
        let c = Counts::of(&f.cases);
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"0\" time=\"{:.6}\">",
            escape(&f.path, true),
            c.cases,
            c.failed,
            c.errors,
            seconds(&f.cases)
        );
        for case in &f.cases {
            let open = format!(
                "    <testcase name=\"{}\" classname=\"{}\" time=\"{:.6}\"",
                escape(&case.name, true),
                escape(&f.name, true),
                case.elapsed.as_secs_f64()
            );
            match &case.outcome {
                CaseOutcome::Pass => {
                    let _ = writeln!(out, "{open}/>");
                }
                CaseOutcome::Fail(diffs) => {
                    let _ = writeln!(out, "{open}>");
                    let _ = writeln!(
                        out,
                        "      <failure type=\"mismatch\" message=\"{}\">{}</failure>",
                        escape(diffs.first().map_or("", String::as_str), true),
                        escape(&diffs.join("\n"), false)
                    );
                    let _ = writeln!(out, "    </testcase>");
                }
                CaseOutcome::Error(e) => {
                    let _ = writeln!(out, "{open}>");
                    let _ = writeln!(
                        out,
                        "      <error type=\"error\" message=\"{}\">{}</error>",
                        escape(e, true),
                        escape(e, false)
                    );
                    let _ = writeln!(out, "    </testcase>");
                }
            }
        }
        let _ = writeln!(out, "  </testsuite>");
    }
    out.push_str("</testsuites>\n");
    out
}

/// `s` as XML 1.0 character data (`attribute`: inside a double-quoted attribute value):
/// `&`, `<`, `>`, `"` and `'` as entities; in an attribute also tab, newline and carriage
/// return as character references (an XML parser would turn them into spaces); a
/// character XML 1.0 cannot hold at all (other C0 controls, U+FFFE, U+FFFF) as the text
/// `\u{..}`, so nothing of a case name or reason is lost and the document stays
/// well-formed.
pub fn escape(s: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' if attribute => {
                let _ = write!(out, "&#{};", ch as u32);
            }
            '\t' | '\n' | '\r' => out.push(ch),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}
