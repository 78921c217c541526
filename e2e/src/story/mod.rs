//! The colocation story of `koord-playground --story`: on the embedded cluster, apply the seed
//! examples, deploy LS and BE pods, then play LS load rising and falling and a memory surge,
//! and watch batch resources, BE suppression, LS CPU burst and eviction follow.
//!
//! The story logic (what plays when, what is observed, the summary) knows nothing of the
//! screen: it updates a [`StoryState`] and hands it to a [`View`] after every change; the views
//! are a live terminal table ([`view::tui`]) and a plain line printer ([`view::lines`]).

pub mod memory;
pub mod observe;
mod play;
pub mod seeds;
pub mod stage;
pub mod state;
pub mod summary;
pub mod timeline;
pub mod view;
pub mod workload;

use std::path::PathBuf;
use std::time::Duration;

pub use play::play;
pub use state::StoryState;
pub use summary::{Outcome, Summary};

/// How to play the story.
#[derive(Debug, Clone)]
pub struct StoryOptions {
    /// How long the played part lasts (setup comes on top), at least
    /// [`timeline::MIN_DURATION`].
    pub duration: Duration,
    /// Simulated nodes.
    pub nodes: usize,
    /// Use the fake cgroup tree even where real cgroups are writable.
    pub fake_cgroups: bool,
    /// Directory of the CRD manifests.
    pub crds: PathBuf,
    /// Where to write a kubeconfig for kubectl while the story plays (none: not written).
    pub kubeconfig: Option<PathBuf>,
}

/// Why the story could not play.
#[derive(Debug, thiserror::Error)]
pub enum StoryError {
    /// A flag is out of range.
    #[error("{0}")]
    Options(String),
    /// The embedded API server failed.
    #[error("embedded cluster: {0}")]
    Cluster(#[source] koord_testcluster::ClusterError),
    /// The simulated nodes failed.
    #[error("simulated nodes: {0}")]
    Nodes(#[source] koord_testcluster::node::NodeError),
    /// CRDs, namespace or PriorityClasses could not be installed.
    #[error(transparent)]
    Setup(#[from] crate::setup::SetupError),
    /// A component did not start.
    #[error(transparent)]
    Components(#[from] crate::components::ComponentError),
    /// A seed document does not parse.
    #[error("seed {what}: {source}")]
    Seed {
        /// Which document.
        what: &'static str,
        /// The parse error.
        #[source]
        source: serde_yaml::Error,
    },
    /// An object the story builds does not convert (a bug in the story).
    #[error("{what} object: {source}")]
    Object {
        /// Which object.
        what: &'static str,
        /// The conversion error.
        #[source]
        source: serde_json::Error,
    },
    /// The API server refused a request.
    #[error("{what}: {source}")]
    Api {
        /// What was asked.
        what: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// Something the story waits for did not happen in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        after: Duration,
    },
    /// The terminal could not be drawn on.
    #[error("terminal: {0}")]
    Terminal(#[source] std::io::Error),
    /// Ctrl-C or SIGTERM.
    #[error("interrupted")]
    Interrupted,
}

/// Renders the story's state; called after every change.
pub trait View {
    /// Shows `state`.
    fn update(&mut self, state: &StoryState) -> Result<(), StoryError>;
}
