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
struct ComponentLabel {
    component: &'static str,
}

/// A member cluster: the label of every per-member series (the dispatcher's and the agents').
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ClusterLabel {
    pub cluster: String,
}

#[derive(Clone, Debug, Default)]
pub struct Shared {
    reconcile_errors: Family<ComponentLabel, Counter>,
}

impl Shared {
    pub fn register(registry: &mut Registry) -> Self {
        let s = Shared::default();
        registry.register(
            "stowage_reconcile_errors",
            "Dispatcher cycles and agent rounds that failed (each retried with back-off)",
            s.reconcile_errors.clone(),
        );
        registry.register(
            "stowage_accept_errors",
            "Connections a listener of this process failed to accept (out of file descriptors, reset), each retried",
            crate::listen::accept_errors(),
        );
        s
    }

    /// Shows `component`'s series at 0 before its first error.
    pub fn touch(&self, component: Component) {
        let _ = self.reconcile_errors.get_or_create(&ComponentLabel { component: component.as_str() });
    }

    pub fn reconcile_error(&self, component: Component) {
        self.reconcile_errors.get_or_create(&ComponentLabel { component: component.as_str() }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_errors_of_each_component_are_one_family() {
        let mut registry = Registry::default();
        let shared = Shared::register(&mut registry);
        shared.reconcile_error(Component::Agent);
        shared.clone().reconcile_error(Component::Agent);
        shared.reconcile_error(Component::Dispatcher);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        assert!(text.contains("stowage_reconcile_errors_total{component=\"agent\"} 2"), "{text}");
        assert!(text.contains("stowage_reconcile_errors_total{component=\"dispatcher\"} 1"), "{text}");
        assert_eq!(text.matches("# TYPE stowage_reconcile_errors counter").count(), 1, "{text}");
    }
}
