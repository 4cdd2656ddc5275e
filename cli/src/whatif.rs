//! `stowage simulate --from KUBECONFIG [--what-if EDIT]…`: the hub's outlook, and beside it the
//! outlook after the edits, per queue.

use std::fmt::Write as _;
use std::time::Duration;

use dispatcher::decide::whatif::{Edit, EditError, Expected, JobOutlook, outlook};
use dispatcher::decide::{Observed, Settings};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The report: one row per unfinished TrainJob, its expected start and end now and (with edits)
/// after them, and how much sooner or later it starts.
pub fn report(observed: &Observed, edits: &[Edit], horizon: Duration) -> Result<String, EditError> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let config = scheduler_core::Config::stowage();
    let settings = Settings::default();
    let (before, unknown_s) = outlook(observed, &config, &settings, now.clone(), horizon, None);
    let after = if edits.is_empty() {
        None
    } else {
        let mut edited = observed.clone();
        for e in edits {
            e.apply(&mut edited, &now)?;
        }
        Some(outlook(&edited, &config, &settings, now, horizon, Some(unknown_s)).0)
    };
    Ok(render(observed, edits, horizon, &before, after.as_deref(), unknown_s))
}

fn render(
    observed: &Observed,
    edits: &[Edit],
    horizon: Duration,
    before: &[JobOutlook],
    after: Option<&[JobOutlook]>,
    unknown_s: u64,
) -> String {
    let mut out = String::new();
    let waiting = before.iter().filter(|j| matches!(j.expected, Expected::Waiting(_))).count();
    let _ = writeln!(
        out,
        "hub: {} members, {} unfinished TrainJobs ({waiting} waiting) | horizon {}",
        observed.members.len(),
        before.len(),
        span(horizon.as_secs())
    );
    let _ = writeln!(out, "run times not stated are taken as {} (the running jobs' median)", span(unknown_s));
    if before.iter().any(|j| matches!(j.expected, Expected::Running { ends_in_s: None, .. })) {
        let _ = writeln!(
            out,
            "a job whose end is not known yet (its member has not reported where its pods are) is not counted as ending"
        );
    }
    for e in edits {
        let _ = writeln!(out, "what-if: {e}");
    }
    if before.is_empty() {
        let _ = writeln!(out, "\nno unfinished TrainJob");
        return out;
    }
    // Each row's cells first, so that the columns are as wide as their widest cell.
    let rows: Vec<[String; 4]> = before
        .iter()
        .map(|b| {
            let a = after.map(|after| after.iter().find(|a| a.namespace == b.namespace && a.name == b.name));
            let then = a.map(|a| a.map_or_else(|| "-".to_string(), |a| describe(&a.expected)));
            let change = a.flatten().map(|a| change(&b.expected, &a.expected));
            [
                format!("{}/{}", b.namespace, b.name),
                describe(&b.expected),
                then.unwrap_or_default(),
                change.unwrap_or_default(),
            ]
        })
        .collect();
    let width =
        |i: usize, title: &str| rows.iter().map(|r| r[i].chars().count()).chain([title.len()]).max().unwrap_or(0);
    let (job_w, now_w, after_w) = (width(0, "TRAINJOB"), width(1, "NOW"), width(2, "AFTER"));
    let line = |cells: [&str; 4]| {
        let text = match after {
            None => format!("  {:<job_w$}  {}", cells[0], cells[1]),
            Some(_) => format!("  {:<job_w$}  {:<now_w$}  {:<after_w$}  {}", cells[0], cells[1], cells[2], cells[3]),
        };
        text.trim_end().to_string()
    };
    let mut queue = None;
    for (b, row) in before.iter().zip(&rows) {
        if queue != Some(&b.queue) {
            queue = Some(&b.queue);
            let _ = writeln!(out, "\nqueue {}", b.queue);
            let _ = writeln!(out, "{}", line(["TRAINJOB", "NOW", "AFTER", "CHANGE"]));
        }
        let _ = writeln!(out, "{}", line([&row[0], &row[1], &row[2], &row[3]]));
    }
    out
}

/// `running on X, ends in 2h05m`, `starts in 1h on X, ends in 3h`, `does not start within the
/// horizon`.
fn describe(e: &Expected) -> String {
    match e {
        Expected::Running { cluster, ends_in_s: Some(s) } => format!("running on {cluster}, ends {}", when(*s)),
        Expected::Running { cluster, ends_in_s: None } => format!("running on {cluster}, end not known yet"),
        Expected::Waiting(Some((cluster, start, end))) => {
            format!("starts {} on {cluster}, ends {}", when(*start), when(*end))
        }
        Expected::Waiting(None) => "not within the horizon".into(),
        Expected::Held(why) => format!("held: {why}"),
    }
}

/// How much sooner (or later) a waiting job starts after the edits.
fn change(before: &Expected, after: &Expected) -> String {
    match (before, after) {
        (Expected::Waiting(Some((_, b, _))), Expected::Waiting(Some((_, a, _)))) if a < b => {
            format!("{} sooner", span(b - a))
        }
        (Expected::Waiting(Some((_, b, _))), Expected::Waiting(Some((_, a, _)))) if a > b => {
            format!("{} later", span(a - b))
        }
        (Expected::Waiting(None), Expected::Waiting(Some(_))) => "starts within the horizon".into(),
        (Expected::Waiting(Some(_)), Expected::Waiting(None)) => "no longer within the horizon".into(),
        (Expected::Running { .. }, Expected::Waiting(_)) => "waits again".into(),
        _ => String::new(),
    }
}

fn when(s: u64) -> String {
    if s == 0 { "now".into() } else { format!("in {}", span(s)) }
}

/// `45s`, `12m`, `3h05m`, `2d04h`.
fn span(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_and_changes_read_as_an_admin_says_them() {
        assert_eq!(
            (span(45), span(720), span(11_100), span(187_200)),
            ("45s".into(), "12m".into(), "3h05m".into(), "2d04h".into())
        );
        let at = |s| Expected::Waiting(Some(("east".into(), s, s + 60)));
        assert_eq!(change(&at(3600), &at(0)), "1h00m sooner");
        assert_eq!(change(&at(0), &at(120)), "2m later");
        assert_eq!(change(&Expected::Waiting(None), &at(0)), "starts within the horizon");
        assert_eq!(describe(&at(0)), "starts now on east, ends in 1m");
        let why = "pending: UnknownQueue: queue team-z does not exist";
        assert_eq!(describe(&Expected::Held(why.into())), format!("held: {why}"));
    }

    /// Each column starts where its header does, however long the cells in it.
    #[test]
    fn the_columns_line_up_with_their_headers() {
        let job = |name: &str, expected: Expected| JobOutlook {
            namespace: "ml".into(),
            name: name.into(),
            queue: "team-a".into(),
            expected,
        };
        let before = [
            job("a", Expected::Waiting(Some(("east-h100".into(), 3540, 7140)))),
            job("long-name-of-a-trainjob", Expected::Held("pending: UnknownQueue: queue team-z does not exist".into())),
        ];
        let after = [job("a", Expected::Waiting(Some(("east-h100".into(), 0, 3600)))), before[1].clone()];
        let text = render(&Observed::default(), &[], Duration::from_secs(3600), &before, Some(&after), 600);
        let lines: Vec<&str> = text.lines().skip_while(|l| !l.contains("TRAINJOB")).collect();
        let header = lines[0];
        for title in ["NOW", "AFTER", "CHANGE"] {
            let col = header.find(title).expect(title);
            for row in lines[1..].iter().filter(|r| r.len() > col) {
                let cell = &row[col..];
                assert!(row.as_bytes()[col - 1] == b' ' && !cell.starts_with(' '), "{title} at {col}:\n{text}");
            }
        }
    }
}
