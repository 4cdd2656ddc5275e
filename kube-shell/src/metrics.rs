//! The metrics every controller of Stowage shares, registered once per registry: one process
//! (`stowage dev`) may run a dispatcher and several agents and serve them on one endpoint,
//! where a metric registered twice would be two families of one name.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Which controller: a closed set.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Component {
    Dispatcher,
    Agent,
}

impl Component {
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Dispatcher => "dispatcher",
            Component::Agent => "agent",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    component: &'static str,
    kind: &'static str,
}

/// What kind of failure an API call ended in, as a metric label: a closed set, never a message,
/// so an operator can tell a hub refusing writes (`forbidden`, `invalid`) from one out of reach
/// (`unreachable`) or busy (`conflict`, `throttled`, `server`).
pub fn api_error_kind(e: &kube::Error) -> &'static str {
    match e {
        kube::Error::Api(status) => match status.code {
            403 => "forbidden",
            404 => "not_found",
            409 => "conflict",
            400 | 422 => "invalid",
            429 => "throttled",
            500..=599 => "server",
            _ => "api",
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => "unreachable",
        kube::Error::SerdeError(_) | kube::Error::FromUtf8(_) | kube::Error::LinesCodecMaxLineLengthExceeded => {
            "response"
        }
        _ => "client",
    }
}

/// A member cluster: the label of every per-member series (the dispatcher's and the agents').
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ClusterLabel {
    pub cluster: String,
}

#[derive(Clone, Debug, Default)]
pub struct Shared {
    reconcile_errors: Family<ErrorLabels, Counter>,
}

impl Shared {
    pub fn register(registry: &mut Registry) -> Self {
        let s = Shared::default();
        registry.register(
            "stowage_reconcile_errors",
            "Dispatcher cycles and agent rounds that failed (each retried with back-off), by the kind of failure",
            s.reconcile_errors.clone(),
        );
        registry.register(
            "stowage_accept_errors",
            "Connections a listener of this process failed to accept (out of file descriptors, reset), each retried",
            crate::listen::accept_errors(),
        );
        s
    }

    /// Shows `component`'s series at 0 before its first error: the most common kind, which
    /// `rate()` over the family then sees from the start.
    pub fn touch(&self, component: Component) {
        let _ =
            self.reconcile_errors.get_or_create(&ErrorLabels { component: component.as_str(), kind: "unreachable" });
    }

    /// One failed cycle or round, of `kind` (a closed set: [`api_error_kind`]'s or the
    /// component's own error kinds).
    pub fn reconcile_error(&self, component: Component, kind: &'static str) {
        self.reconcile_errors.get_or_create(&ErrorLabels { component: component.as_str(), kind }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_errors_of_each_component_are_one_family() {
        let mut registry = Registry::default();
        let shared = Shared::register(&mut registry);
        shared.reconcile_error(Component::Agent, "render");
        shared.clone().reconcile_error(Component::Agent, "render");
        shared.reconcile_error(Component::Agent, "conflict");
        shared.reconcile_error(Component::Dispatcher, "forbidden");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(text.contains("stowage_reconcile_errors_total{component=\"agent\",kind=\"render\"} 2"), "{text}");
        assert!(text.contains("stowage_reconcile_errors_total{component=\"agent\",kind=\"conflict\"} 1"), "{text}");
        assert!(
            text.contains("stowage_reconcile_errors_total{component=\"dispatcher\",kind=\"forbidden\"} 1"),
            "{text}"
        );
        assert_eq!(text.matches("# TYPE stowage_reconcile_errors counter").count(), 1, "{text}");
    }

    #[test]
    fn an_api_error_is_named_by_its_code() {
        let status = |code: u16| kube::Error::Api(Box::new(kube::core::Status { code, ..Default::default() }));
        let kinds: Vec<&str> =
            [403, 404, 409, 422, 400, 429, 503, 418].map(status).iter().map(api_error_kind).collect();
        assert_eq!(kinds, ["forbidden", "not_found", "conflict", "invalid", "invalid", "throttled", "server", "api"]);
        assert_eq!(api_error_kind(&kube::Error::LinesCodecMaxLineLengthExceeded), "response");
    }
}
