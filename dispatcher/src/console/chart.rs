//! Decisions over time for a hook's overview (issue 14 point 7): runs counted per hour
//! and decision, drawn as stacked bars in inline SVG with the same numbers in a table
//! (the chart is an image for sighted readers; the table is the accessible form).
//! Pure: rows and the current time in, buckets and markup out.

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use maud::{Markup, html};

/// The decisions counted, in the order they are stacked and listed.
pub const DECISIONS: [&str; 4] = ["allow", "block", "error", "timeout"];

/// Runs of one hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// The hour's start.
    pub start: DateTime<Utc>,
    /// Runs by decision, in [`DECISIONS`] order.
    pub counts: [u64; 4],
}

impl Bucket {
    /// All runs of the hour.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// `hours` buckets ending with the one holding `now`, oldest first, counting `runs`
/// (time, decision); runs outside the window or with another decision are left out.
pub fn buckets<'a>(
    runs: impl IntoIterator<Item = (DateTime<Utc>, &'a str)>,
    now: DateTime<Utc>,
    hours: u32,
) -> Vec<Bucket> {
    let hour = TimeDelta::hours(1);
    let last = now.duration_trunc(hour).unwrap_or(now);
    let first = last - hour * (hours.max(1) as i32 - 1);
    let mut out: Vec<Bucket> = (0..hours.max(1))
        .map(|i| Bucket {
            start: first + hour * i as i32,
            counts: [0; 4],
        })
        .collect();
    for (at, decision) in runs {
        let Some(d) = DECISIONS.iter().position(|x| *x == decision) else {
            continue;
        };
        if at < first || at >= last + hour {
            continue;
        }
        let i = ((at - first).num_seconds() / 3600) as usize;
        if let Some(b) = out.get_mut(i) {
            b.counts[d] += 1;
        }
    }
    out
}

/// The chart and its table; `id` makes the SVG's title and description ids unique.
pub fn render(buckets: &[Bucket], id: &str) -> Markup {
    const W: u32 = 480;
    const H: u32 = 120;
    let max = buckets.iter().map(Bucket::total).max().unwrap_or(0).max(1);
    let n = buckets.len().max(1) as u32;
    let bar = W / n;
    let total: u64 = buckets.iter().map(Bucket::total).sum();
    let summary: Vec<String> = DECISIONS
        .iter()
        .enumerate()
        .map(|(i, d)| format!("{} {d}", buckets.iter().map(|b| b.counts[i]).sum::<u64>()))
        .collect();
    let title = format!("Decisions per hour, last {} hours", buckets.len());
    let runs = if total == 1 { "run" } else { "runs" };
    let desc = format!("{total} {runs}: {}", summary.join(", "));
    html! {
        figure.chart {
            svg data-testid="decisions-chart" role="img" viewBox={"0 0 " (W) " " (H + 14)}
                aria-labelledby={(id) "-title " (id) "-desc"} {
                title id={(id) "-title"} { (title) }
                desc id={(id) "-desc"} { (desc) }
                @for (i, b) in buckets.iter().enumerate() {
                    @let x = i as u32 * bar;
                    @let mut y = H;
                    @for (d, count) in b.counts.iter().enumerate() {
                        @if *count > 0 {
                            @let h = ((*count * H as u64) / max).max(1) as u32;
                            @let top = { y -= h.min(y); y };
                            rect class={"bar " (DECISIONS[d])} x=(x + 1) y=(top) width=(bar.saturating_sub(2).max(1)) height=(h) {
                                title { (b.start.format("%H:00")) ": " (count) " " (DECISIONS[d]) }
                            }
                        }
                    }
                }
                line x1="0" y1=(H) x2=(W) y2=(H) class="axis" {}
                @if let (Some(first), Some(last)) = (buckets.first(), buckets.last()) {
                    text x="0" y=(H + 12) class="tick" { (first.start.format("%H:00")) }
                    text x=(W) y=(H + 12) class="tick end" { (last.start.format("%H:00")) " UTC" }
                }
            }
            figcaption { (desc) }
        }
        details {
            summary { "Decisions per hour as a table" }
            table data-testid="decisions-table" {
                thead { tr { th scope="col" { "Hour (UTC)" } @for d in DECISIONS { th scope="col" { (d) } } } }
                tbody {
                    @for b in buckets.iter().filter(|b| b.total() > 0) {
                        tr { th scope="row" { (b.start.format("%Y-%m-%d %H:00")) } @for c in b.counts { td { (c) } } }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn runs_fall_into_their_hour_and_the_window_ends_with_now() {
        let now = at("2026-12-03T19:40:00Z");
        let runs = [
            (at("2026-12-03T19:05:00Z"), "block"),
            (at("2026-12-03T19:39:59Z"), "allow"),
            (at("2026-12-03T18:00:00Z"), "allow"),
            (at("2026-12-03T17:59:59Z"), "error"), // before the 2-hour window
            (at("2026-12-03T20:00:00Z"), "allow"), // after it
            (at("2026-12-03T19:10:00Z"), "weird"), // not a decision
            (at("2026-12-03T18:30:00Z"), "timeout"),
        ];
        let b = buckets(runs, now, 2);
        assert_eq!(
            b,
            vec![
                Bucket {
                    start: at("2026-12-03T18:00:00Z"),
                    counts: [1, 0, 0, 1]
                },
                Bucket {
                    start: at("2026-12-03T19:00:00Z"),
                    counts: [1, 1, 0, 0]
                },
            ]
        );
    }

    #[test]
    fn the_chart_says_its_numbers_in_words_and_in_a_table() {
        let now = at("2026-12-03T19:40:00Z");
        let b = buckets([(at("2026-12-03T19:05:00Z"), "block")], now, 24);
        assert_eq!(b.len(), 24);
        let html = render(&b, "h").into_string();
        assert!(
            html.contains("1 run: 0 allow, 1 block, 0 error, 0 timeout"),
            "{html}"
        );
        assert!(html.contains(r#"class="bar block""#), "{html}");
        assert!(
            html.contains("<th scope=\"row\">2026-12-03 19:00</th><td>0</td><td>1</td>"),
            "{html}"
        );
        let empty = render(&buckets([], now, 24), "h").into_string();
        assert!(empty.contains("0 runs"), "{empty}");
        assert!(!empty.contains("<rect"), "{empty}");
    }
}
