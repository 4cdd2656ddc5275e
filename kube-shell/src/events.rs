//! Recording core/v1 Events the way `kubectl describe` counts them: an Event's name says what
//! happened to which object, so the same thing again counts the same Event up (`x3 over 5m`),
//! as the API server's own recorder aggregates, instead of a new object each time.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

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
    use futures::StreamExt;
    futures::stream::iter(records)
        .for_each_concurrent(concurrent, |r| async move {
            if let Err(error) = record(client, &r).await {
                tracing::warn!(event = %r.name, %error, "recording an Event failed");
            }
        })
        .await;
}
