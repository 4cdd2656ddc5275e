//! What a replay told one job, instant by instant (`simulate --explain JOB`): why it waited,
//! where it ran, what ended it. A report's figures say how long the jobs of a size waited; the
//! story of the one that waited longest says why, in the cycle's own words, which is what an
//! admin asks next.
//!
//! A story is a list of steps, one per change of what the job was told: the kind of reason it
//! waited for (`Reason::kind`), or running, completed, rejected. Within a step the words can
//! change (a wait's estimate moves every cycle); the step keeps the first, and counts the
//! instants it lasted, so a story stays as long as the job's changes of kind, not its cycles.

use serde::Serialize;

use super::{JobRecord, Outcome, PlacementFacts};
use scheduler_core::Level;

/// The most steps kept per story: a job whose reason flips kind every cycle would otherwise
/// write one step per instant of the replay. The rest are counted (`Story::steps_left_out`).
pub const MAX_STEPS: usize = 200;

/// The most jobs one run explains: each costs a look per instant.
pub const MAX_JOBS: usize = 16;

/// One job's story in one policy's run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Story {
    pub job: String,
    pub submit_s: u64,
    pub steps: Vec<Step>,
    /// Changes after the first [`MAX_STEPS`], counted, not kept.
    #[serde(skip_serializing_if = "is_zero")]
    pub steps_left_out: u64,
    /// The kind the last instant looked at was told, kept or not.
    #[serde(skip)]
    told: Option<&'static str>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A stretch of instants in which the job was told one kind of thing.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Step {
    /// The first and last instant of the stretch, seconds of the replay.
    pub from_s: u64,
    pub to_s: u64,
    pub instants: u64,
    /// `running`, `completed`, `rejected`, or the kind of reason it waited for.
    pub kind: String,
    /// The words of the stretch's first instant.
    pub words: String,
}

impl Story {
    pub(super) fn new(record: &JobRecord) -> Self {
        Story { job: record.id.clone(), submit_s: record.submit_s, steps: Vec::new(), steps_left_out: 0, told: None }
    }

    /// Looks at the job after the cycles of instant `t`. Nothing before it arrives (its record
    /// holds the words every job starts with).
    pub(super) fn observe(&mut self, t: u64, record: &JobRecord) {
        if t < record.submit_s {
            return;
        }
        let kind = kind_of(&record.outcome);
        if matches!(self.told, Some("completed" | "rejected" | "failed")) {
            // The story ends there: nothing is told a job that left.
            return;
        }
        if self.told == Some(kind) {
            // The same stretch: the kept step grows (a stretch left out has none).
            if self.steps_left_out == 0
                && let Some(step) = self.steps.last_mut()
            {
                step.to_s = t;
                step.instants += 1;
            }
            return;
        }
        self.told = Some(kind);
        if self.steps.len() >= MAX_STEPS {
            self.steps_left_out += 1;
            return;
        }
        self.steps.push(Step {
            from_s: t,
            to_s: t,
            instants: 1,
            kind: kind.to_string(),
            words: words_of(&record.outcome, record.placement.as_ref()),
        });
    }
}

fn kind_of(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Completed => "completed",
        Outcome::Running => "running",
        Outcome::Pending(r) => r.kind(),
        Outcome::Rejected(_) => "rejected",
        Outcome::Failed => "failed",
    }
}

fn words_of(outcome: &Outcome, placement: Option<&PlacementFacts>) -> String {
    match (outcome, placement) {
        (Outcome::Pending(r), _) => r.to_string(),
        (Outcome::Rejected(r), _) => r.to_string(),
        (Outcome::Running, Some(p)) => {
            let span = match p.span_level {
                Some(Level::Host) => "on one host".to_string(),
                Some(Level::Nvlink) => "within one NVLink domain".to_string(),
                Some(level) => format!("within one {level}"),
                None => "across the cluster".to_string(),
            };
            format!("on {}: {} host(s), {span}, running {:.3}× as long as alone", p.cluster, p.hosts, p.slowdown)
        }
        (Outcome::Running, None) => "running".to_string(),
        (Outcome::Completed, _) => "completed".to_string(),
        (Outcome::Failed, _) => "node failures cut its runs short more often than --max-restarts allows".to_string(),
    }
}

/// The story as text, one line per step, times in hours after the job's submission; a step
/// lasts until the next one begins (its last instant is the one before that).
pub fn text(policy: &str, story: &Story) -> String {
    use std::fmt::Write;
    let h = |s: u64| s.saturating_sub(story.submit_s) as f64 / 3600.0;
    let mut out =
        format!("{policy}: {} (submitted at {:.2} h of the replay)\n", story.job, story.submit_s as f64 / 3600.0);
    if story.steps.is_empty() {
        out.push_str("  not submitted before the replay ended\n");
    }
    for (i, s) in story.steps.iter().enumerate() {
        let until = story.steps.get(i + 1).map_or(s.to_s, |next| next.from_s);
        let _ = match s.kind.as_str() {
            "completed" => writeln!(out, "  +{:.2} h completed", h(s.from_s)),
            _ => writeln!(
                out,
                "  +{:.2} h to +{:.2} h ({} instant{}) {}: {}",
                h(s.from_s),
                h(until),
                s.instants,
                if s.instants == 1 { "" } else { "s" },
                s.kind,
                s.words
            ),
        };
    }
    if story.steps_left_out > 0 {
        let _ = writeln!(out, "  … {} more changes (the first {MAX_STEPS} are kept)", story.steps_left_out);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use scheduler_core::Reason;

    use super::*;

    fn record(outcome: Outcome) -> JobRecord {
        JobRecord {
            id: "j".into(),
            queue: "q".into(),
            gpus: 8,
            submit_s: 100,
            duration_s: 60,
            priority: 0,
            first_start_s: None,
            end_s: None,
            restarts: 0,
            preemptions: 0,
            lost_gpu_s: 0,
            placement: None,
            outcome,
        }
    }

    /// A job whose words flip kind every instant keeps the first `MAX_STEPS` changes and counts
    /// the rest, however long the replay; a stretch of one kind is one step however long it
    /// lasts; nothing is told before it arrives or after it ends.
    #[test]
    fn a_story_is_bounded_by_its_changes_not_its_instants() {
        let waiting = record(Outcome::Pending(Arc::new(Reason::BeyondDepth { queue: None, depth: 256 })));
        let running = record(Outcome::Running);
        let mut story = Story::new(&waiting);
        story.observe(50, &waiting);
        assert!(story.steps.is_empty(), "not arrived yet");
        for t in 100..1100 {
            story.observe(t, if (t / 2) % 2 == 0 { &waiting } else { &running });
        }
        assert_eq!(story.steps.len(), MAX_STEPS);
        assert_eq!(story.steps_left_out, 500 - MAX_STEPS as u64);
        assert!(story.steps.iter().all(|s| s.instants == 2));

        let mut story = Story::new(&waiting);
        for t in 100..10_100 {
            story.observe(t, &waiting);
        }
        story.observe(10_100, &record(Outcome::Completed));
        story.observe(10_101, &running);
        let steps: Vec<(u64, u64, u64, &str)> =
            story.steps.iter().map(|s| (s.from_s, s.to_s, s.instants, s.kind.as_str())).collect();
        assert_eq!(steps, [(100, 10_099, 10_000, "beyond-depth"), (10_100, 10_100, 1, "completed")]);
        let text = text("stowage", &story);
        assert!(text.contains("+0.00 h to +2.78 h (10000 instants) beyond-depth: "), "{text}");
        assert!(text.ends_with("+2.78 h completed\n"), "{text}");
    }
}
