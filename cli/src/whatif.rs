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
    let (before, unknown_s) = outlook(observed, &config, &settings, now.clone(), horizon);
    let after = if edits.is_empty() {
        None
    } else {
        let mut edited = observed.clone();
        for e in edits {
            e.apply(&mut edited, &now)?;
        }
        Some(outlook(&edited, &config, &settings, now, horizon).0)
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
    let mut queue = None;
    for b in before {
        if queue != Some(&b.queue) {
            queue = Some(&b.queue);
            let _ = writeln!(out, "\nqueue {}", b.queue);
            let header = if after.is_some() { "  now                             after" } else { "  now" };
            let _ = writeln!(out, "  {:<32} {header}", "TRAINJOB");
        }
        let job = format!("{}/{}", b.namespace, b.name);
        let now = describe(&b.expected);
        match after {
            None => {
                let _ = writeln!(out, "  {job:<32} {now}");
            }
            Some(after) => {
                let a = after.iter().find(|a| a.namespace == b.namespace && a.name == b.name);
                let then = a.map_or_else(|| "-".to_string(), |a| describe(&a.expected));
                let change = a.map(|a| change(&b.expected, &a.expected)).unwrap_or_default();
                let _ = writeln!(out, "  {job:<32} {now:<31} {then:<31} {change}");
            }
        }
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
        Expected::Held => "held (suspended or blocked)".into(),
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
    }
}
