//! What can go wrong in a round or a realisation. Each message says what the agent was doing;
//! the cause is the error's `source`, printed once, by whoever prints the chain
//! (`kube_shell::error_chain`).

use std::time::Duration;

use trainer_render::RenderError;
use trainer_render::sshkey::KeyError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    #[error("rendering {namespace}/{name}")]
    Render {
        namespace: String,
        name: String,
        #[source]
        source: RenderError,
    },
    #[error("making the MPI SSH key")]
    Key(#[from] KeyError),
    /// An object the placement renders is already on the member and was not made for it.
    #[error("{kind} {namespace}/{name} already exists on the member and was not made by Stowage for this TrainJob")]
    NameTaken { kind: &'static str, namespace: String, name: String },
    /// What an earlier TrainJob of the same name left on the member is being deleted.
    #[error("{kind} {namespace}/{name} left by an earlier TrainJob of that name is being deleted")]
    Leftover { kind: &'static str, namespace: String, name: String },
    #[error("sync took longer than {0:?}")]
    Timeout(Duration),
}

impl Error {
    /// A stable name for the kind of failure: a metric label, never a message.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube { source, .. } => kube_shell::metrics::api_error_kind(source),
            Error::Render { .. } => "render",
            Error::Key(_) => "key",
            Error::NameTaken { .. } => "name_taken",
            Error::Leftover { .. } => "leftover",
            Error::Timeout(_) => "timeout",
        }
    }
}

pub(crate) fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
}
