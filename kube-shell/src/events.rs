//! Recording core/v1 Events the way `kubectl describe` counts them: an Event's name says what
//! happened to which object, so the same thing again counts the same Event up (`x3 over 5m`),
//! as the API server's own recorder aggregates, instead of a new object each time.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

use futures::StreamExt;

use crate::lean::{self, Lean};

/// One Event to record, or count again.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The Event object's name, in the involved object's namespace.
    pub name: String,
    pub involved: ObjectReference,
    /// `Normal` or `Warning`.
    pub type_: String,
    pub reason: String,
    pub message: String,
    /// How many times it happened since last recorded (at least 1).
    pub times: i32,
    /// Who reports it (`source.component`, `reportingComponent`).
    pub component: String,
}

/// Creates the Event, or counts it up by `times` when one of its name exists for the same
/// object (one for another object of that name, deleted and made again, starts over).
pub async fn record(client: &Client, r: &Record) -> Result<(), kube::Error> {
    let namespace = r.involved.namespace.clone().unwrap_or_default();
    let api = Api::<Event>::namespaced(client.clone(), &namespace);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let times = r.times.max(1);
    let event = Event {
        metadata: ObjectMeta { name: Some(r.name.clone()), namespace: Some(namespace), ..Default::default() },
        involved_object: r.involved.clone(),
        reason: Some(r.reason.clone()),
        message: Some(r.message.clone()),
        type_: Some(r.type_.clone()),
        count: Some(times),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now.clone()),
        source: Some(EventSource { component: Some(r.component.clone()), host: None }),
        reporting_component: Some(r.component.clone()),
        reporting_instance: Some(r.component.clone()),
        ..Default::default()
    };
    // What the create answers is not read: decoded without its managedFields (`lean`).
    let event = Lean(event);
    match lean::api(api.clone()).create(&PostParams::default(), &event).await {
        Err(kube::Error::Api(ae)) if ae.code == 409 => {
            let mut seen = api.get(&r.name).await?;
            let same = seen.involved_object.uid == r.involved.uid;
            seen.count = Some(if same { seen.count.unwrap_or(1).saturating_add(times) } else { times });
            if !same {
                seen.first_timestamp = Some(now.clone());
                seen.involved_object = event.0.involved_object;
            }
            seen.last_timestamp = Some(now);
            seen.message = event.0.message;
            seen.type_ = event.0.type_;
            api.replace(&r.name, &PostParams::default(), &seen).await.map(|_| ())
        }
        other => other.map(|_| ()),
    }
}

/// Records each, at most `concurrent` at once. Events are best effort, as kube's own recorder:
/// one that cannot be written is logged and dropped.
pub async fn record_all(client: &Client, records: Vec<Record>, concurrent: usize) {
    futures::stream::iter(records).for_each_concurrent(concurrent, |r| write_logged(client, r)).await;
}

async fn write_logged(client: &Client, r: Record) {
    if let Err(error) = record(client, &r).await {
        tracing::warn!(event = %r.name, %error, "recording an Event failed");
    }
}

/// Records Events beside the controller that reports them, as client-go's broadcaster does: a
/// controller's cycle hands its Events over and goes on, so the next cycle's writes (a
/// burst's Placements) do not wait behind the last one's Events. Unlike client-go's, which
/// drops Events past a full queue, [`Recorder::record`] waits for room: a burst's Events are
/// late, not lost, and a hub that cannot keep up slows the cycles rather than growing memory.
/// The writer ends once every `Recorder` is dropped and what was queued is written.
#[derive(Debug, Clone)]
pub struct Recorder {
    queue: tokio::sync::mpsc::Sender<Record>,
}

impl Recorder {
    /// Starts the writer on the current runtime, `concurrent` writes at once, with room for
    /// `queued` Events waiting to be written.
    pub fn spawn(client: Client, concurrent: usize, queued: usize) -> Recorder {
        let (queue, rx) = tokio::sync::mpsc::channel(queued.max(1));
        let records = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
        tokio::spawn(async move {
            records.for_each_concurrent(concurrent, |r| write_logged(&client, r)).await;
        });
        Recorder { queue }
    }

    /// Queues the Events, waiting while the queue is full.
    pub async fn record(&self, records: impl IntoIterator<Item = Record>) {
        for r in records {
            // Closed only once the writer's runtime is gone: nothing would write it then.
            if self.queue.send(r).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    fn record(name: &str) -> Record {
        Record {
            name: name.into(),
            involved: ObjectReference { namespace: Some("ns".into()), name: Some("tj".into()), ..Default::default() },
            type_: "Normal".into(),
            reason: "Placed".into(),
            message: "placed".into(),
            times: 1,
            component: "test".into(),
        }
    }

    /// The recorder hands Events to its writer and returns; with its queue full it waits for
    /// room rather than dropping one; every Event queued is written.
    #[tokio::test]
    async fn the_recorder_writes_every_event_and_waits_for_room_when_its_queue_is_full() {
        let created = Arc::new(Mutex::new(Vec::new()));
        let open = Arc::new(tokio::sync::Semaphore::new(0));
        let service = {
            let (created, open) = (created.clone(), open.clone());
            tower::service_fn(move |req: hyper::Request<kube::client::Body>| {
                let (created, open) = (created.clone(), open.clone());
                async move {
                    // The server answers one write per permit.
                    open.acquire().await.map(|p| p.forget()).ok();
                    let body = http_body_util::BodyExt::collect(req.into_body()).await.map(|b| b.to_bytes());
                    let event: serde_json::Value =
                        body.ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
                    created
                        .lock()
                        .map(|mut c| c.push(event["metadata"]["name"].as_str().unwrap_or("").to_string()))
                        .ok();
                    hyper::Response::builder()
                        .header("content-type", "application/json")
                        .body(http_body_util::Full::new(bytes::Bytes::from(event.to_string())))
                }
            })
        };
        let recorder = Recorder::spawn(Client::new(service, "default"), 1, 2);
        // Two queued and one being written are room for three; a fourth waits.
        let three = tokio::time::timeout(Duration::from_secs(5), recorder.record(["a", "b", "c"].map(record))).await;
        assert!(three.is_ok(), "room for three: queued without waiting for the server");
        let four = tokio::time::timeout(Duration::from_millis(200), recorder.record(["d", "e"].map(record))).await;
        assert!(four.is_err(), "a full queue waits for room");
        open.add_permits(5);
        let all = tokio::time::timeout(Duration::from_secs(5), recorder.record([record("f")])).await;
        assert!(all.is_ok(), "room again once the server answers");
        drop(recorder);
        open.add_permits(5);
        for _ in 0..100 {
            if created.lock().map(|c| c.len()).unwrap_or(0) >= 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let created = created.lock().map(|c| c.clone()).unwrap_or_default();
        // `d` and `e` were never queued: the wait for room was given up (its future dropped).
        assert_eq!(created, ["a", "b", "c", "f"], "each queued Event written once, in order");
    }
}
