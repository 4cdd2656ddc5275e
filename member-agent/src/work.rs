//! The pool of realisations in flight.

use std::collections::BTreeSet;
use std::sync::Arc;

use api::stowage::{Placement, PlacementPhase, PlacementStatus};
use kube::{Client, ResourceExt};

use crate::caches::{Caches, Key};
use crate::config::{AgentConfig, CONCURRENT_APPLIES};
use crate::error::Error;
use crate::realise::{ensure_namespace, read, realise};
use crate::report::{claim, write_status};
use crate::step::Wake;

/// The status of a placement whose objects' names are taken on the member: Unschedulable here,
/// saying which object and what to do.
pub(crate) fn name_taken(p: &Placement, taken: &Error) -> PlacementStatus {
    PlacementStatus {
        phase: PlacementPhase::Unschedulable,
        observed_epoch: p.spec.epoch,
        message: Some(format!(
            "NameTaken: {taken}; rename the TrainJob or remove that object (Stowage never changes or deletes what it did not make)"
        )),
        ..Default::default()
    }
}

/// Placements being realised, at most `CONCURRENT_APPLIES` at once: each is claimed, rendered
/// and applied on its own, as soon as the agent sees it, so a burst's first placements
/// need not wait for its last, nor for a round.
#[derive(Debug)]
pub(crate) struct Work {
    pub(crate) running: tokio::task::JoinSet<(Arc<Placement>, Result<(), Error>)>,
    pub(crate) permits: Arc<tokio::sync::Semaphore>,
    /// Member namespaces known to exist: a burst into one namespace checks it once, not once
    /// per placement. Forgotten when an apply fails.
    pub(crate) namespaces: Arc<tokio::sync::Mutex<BTreeSet<String>>>,
}

impl Default for Work {
    fn default() -> Self {
        Work {
            running: tokio::task::JoinSet::new(),
            permits: Arc::new(tokio::sync::Semaphore::new(CONCURRENT_APPLIES)),
            namespaces: Arc::default(),
        }
    }
}

impl Work {
    pub(crate) fn add(&mut self, placements: Vec<Arc<Placement>>, ctx: (&Client, &Client, &AgentConfig, &Caches)) {
        for p in placements {
            let (hub, member, cfg, caches) = (ctx.0.clone(), ctx.1.clone(), ctx.2.clone(), ctx.3.clone());
            let (permits, namespaces) = (self.permits.clone(), self.namespaces.clone());
            self.running.spawn(async move {
                // The semaphore is never closed, so this always waits for a permit.
                let permit = permits.acquire_owned().await.ok();
                let ns = p.namespace().unwrap_or_default();
                let result = async {
                    {
                        // Held while the namespace is made, so a burst into a new one makes it once.
                        let mut known = namespaces.lock().await;
                        if !known.contains(&ns) {
                            ensure_namespace(&member, &ns).await?;
                            known.insert(ns.clone());
                        }
                    }
                    // The claim and the reads are independent round trips to the hub: made at
                    // once, a realisation waits for one of them before it touches the member,
                    // not for both in turn (in a burst the hub's queue is the longest wait).
                    // What was read is used only once the claim stands.
                    let (claimed, inputs) = tokio::join!(claim(&hub, &cfg.cluster, &p), read(&hub, &caches, &p));
                    claimed?;
                    let realised = realise(&member, &cfg, &p, &inputs?).await;
                    // The member's part is done: the next placement may start.
                    drop(permit);
                    // Made: the claim stands until the next round reports what the JobSet
                    // says (Applied with its counts, or already Running). An Applied written
                    // here as well was a third Placement status write per TrainJob, a tenth
                    // of the hub's writes in a burst (issue #39), always overwritten moments
                    // later by the round's counts.
                    if let Err(taken @ Error::NameTaken { .. }) = &realised {
                        // Someone else's object holds a name the gang needs: it cannot run here
                        // as it is, and the dispatcher tells the user which object and moves it.
                        write_status(&hub, &ns, &p.name_any(), &name_taken(&p, taken)).await?;
                    }
                    realised
                }
                .await;
                if result.is_err() {
                    namespaces.lock().await.clear();
                }
                (p, result)
            });
        }
    }

    /// The next realisation to end, as the wake it is.
    pub(crate) async fn next(&mut self) -> Option<Wake> {
        loop {
            match self.running.join_next().await? {
                Ok((p, result)) => {
                    let key = Key::of(&p);
                    return Some(Wake::Realised { key, placement: p.name_any(), result });
                }
                // Cancelled is how `abandon` stops them; only a panic is news.
                Err(error) if error.is_panic() => tracing::error!(%error, "a realisation task panicked"),
                Err(_) => {}
            }
        }
    }

    /// Drops everything queued and running: the hub is lost and nothing new may start.
    pub(crate) fn abandon(&mut self) {
        self.running.abort_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::{Value, json};

    use super::*;
    use crate::testkit::{caches, config, placement};

    type Asked = Arc<Mutex<Vec<String>>>;

    /// A client of a fake API server that answers each request by `answer(method, path)` and
    /// keeps what it was asked, as `METHOD path`.
    fn fake(answer: fn(&str, &str) -> (u16, Value)) -> (Client, Asked) {
        let asked = Asked::default();
        let seen = asked.clone();
        let service = tower::service_fn(move |req: hyper::Request<kube::client::Body>| {
            let (method, path) = (req.method().to_string(), req.uri().path().to_string());
            seen.lock().expect("asked").push(format!("{method} {path}"));
            let (code, body) = answer(&method, &path);
            async move {
                hyper::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(bytes::Bytes::from(body.to_string())))
            }
        });
        (Client::new(service, "default"), asked)
    }

    fn status(code: u16, reason: &str) -> (u16, Value) {
        (
            code,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code,
                      "message": reason}),
        )
    }

    /// The hub: the TrainJob and its runtime are there to read; the claim is answered by
    /// `claim`.
    fn hub(claim: (u16, Value), method: &str, path: &str) -> (u16, Value) {
        match (method, path) {
            ("PATCH", "/apis/stowage.dev/v1alpha1/namespaces/team/placements/u1/status") => claim,
            ("GET", "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/u1") => (
                200,
                json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "u1", "namespace": "team", "uid": "u1"},
                "spec": {"runtimeRef": {"name": "torch"}}}),
            ),
            ("GET", "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/torch") => (
                200,
                json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                "metadata": {"name": "torch"},
                "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                         "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {
                             "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                             "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch"}]}}}}}]}}}}),
            ),
            _ => status(404, "NotFound"),
        }
    }

    /// The member: its namespace exists, nothing else does yet, and what is applied is taken.
    fn member(method: &str, path: &str) -> (u16, Value) {
        match method {
            "GET" if path == "/api/v1/namespaces/team" => {
                (200, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}))
            }
            "PATCH" => (200, json!({"apiVersion": "v1", "kind": "Object", "metadata": {"name": "u1"}})),
            _ => status(404, "NotFound"),
        }
    }

    /// One placement realised against the fake hub and member: its outcome, and what each was
    /// asked.
    async fn realise_one(hub: fn(&str, &str) -> (u16, Value)) -> (Result<(), Error>, Vec<String>, Vec<String>) {
        let ((hub, hub_asked), (member, member_asked)) = (fake(hub), fake(member));
        let mut p = placement("u1", "east", None);
        p.metadata.resource_version = Some("7".into());
        let mut work = Work::default();
        work.add(vec![Arc::new(p)], (&hub, &member, &config(), &caches(Vec::new(), Vec::new())));
        let Some(Wake::Realised { result, .. }) = work.next().await else { panic!("a realisation ends") };
        let asked = |a: Asked| a.lock().expect("asked").clone();
        (result, asked(hub_asked), asked(member_asked))
    }

    /// The claim and the TrainJob's read go to the hub at once; a claim refused (the Placement
    /// changed since the agent's cache saw it, 409) makes nothing on the member, although the
    /// read succeeded: what was read is used only once the claim stands.
    #[tokio::test]
    async fn a_refused_claim_makes_nothing_though_the_trainjob_was_read() {
        let (result, hub_asked, member_asked) = realise_one(|m, p| hub(status(409, "Conflict"), m, p)).await;
        let error = result.expect_err("a refused claim fails the realisation");
        assert!(kube_shell::error_chain(&error).contains("claiming Placement team/u1"), "{error}");
        assert!(
            hub_asked.iter().any(|a| a.ends_with("/trainjobs/u1")),
            "the read went out beside the claim: {hub_asked:?}"
        );
        assert_eq!(member_asked, ["GET /api/v1/namespaces/team"], "nothing but the namespace looked at");
    }

    /// The same realisation with the claim standing: the names are read and the objects applied
    /// on the member, the JobSet among them (so the test above fails if claims stop mattering).
    #[tokio::test]
    async fn a_standing_claim_reads_the_names_and_applies_the_objects() {
        let (result, hub_asked, member_asked) = realise_one(|m, p| {
            let claimed = json!({"apiVersion": "stowage.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "u1", "namespace": "team"}, "spec": {"trainJobUid": "u1", "cluster": "east", "epoch": 1}});
            hub((200, claimed), m, p)
        })
        .await;
        result.expect("realised");
        assert!(
            hub_asked.iter().any(|a| a.starts_with("PATCH ") && a.ends_with("/placements/u1/status")),
            "{hub_asked:?}"
        );
        let applied: Vec<&String> = member_asked.iter().filter(|a| a.starts_with("PATCH ")).collect();
        assert!(applied.iter().any(|a| a.ends_with("/jobsets/u1")), "the JobSet applied: {member_asked:?}");
        let first_apply = member_asked.iter().position(|a| a.starts_with("PATCH ")).expect("applied");
        assert!(
            member_asked[..first_apply]
                .iter()
                .filter(|a| a.starts_with("GET ") && !a.ends_with("/namespaces/team"))
                .count()
                == applied.len(),
            "every name read before anything is applied: {member_asked:?}"
        );
    }

    #[test]
    fn a_taken_name_is_reported_unschedulable_naming_the_object() {
        let p = placement("u1", "east", None);
        let taken = Error::NameTaken { kind: "JobSet", namespace: "team".into(), name: "train".into() };
        let s = name_taken(&p, &taken);
        assert_eq!((s.phase, s.observed_epoch), (PlacementPhase::Unschedulable, 1));
        let message = s.message.unwrap_or_default();
        assert!(message.starts_with("NameTaken: JobSet team/train already exists on the member"), "{message}");
    }
}
