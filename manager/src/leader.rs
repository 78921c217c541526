//! Leader election: every replica watches and computes; only the Lease holder writes.

use futures::{Stream, stream};
use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

/// Whether this replica may write; cheap to clone.
#[derive(Clone, Debug)]
pub struct Leadership {
    state: watch::Receiver<bool>,
    // Keeps the channel open when leadership is fixed (no election).
    _fixed: Option<std::sync::Arc<watch::Sender<bool>>>,
}

impl Leadership {
    /// No election (`--leader-elect=false`): always the writer.
    pub fn always() -> Self {
        let (sender, state) = watch::channel(true);
        Leadership {
            state,
            _fixed: Some(std::sync::Arc::new(sender)),
        }
    }

    /// Follows a lock-state channel.
    pub fn from_channel(state: watch::Receiver<bool>) -> Self {
        Leadership { state, _fixed: None }
    }

    /// True while this replica holds the Lease.
    pub fn is_leader(&self) -> bool {
        // A closed channel means the election task ended: this replica no longer holds a lease.
        *self.state.borrow() && self.state.has_changed().is_ok()
    }

    /// Yields once every time this replica becomes the leader (so it reconciles everything).
    pub fn gained(&self) -> impl Stream<Item = ()> + Send + 'static {
        let state = self.state.clone();
        stream::unfold(state, |mut state| async move {
            loop {
                state.changed().await.ok()?;
                if *state.borrow_and_update() {
                    return Some(((), state));
                }
            }
        })
    }
}

/// Why leader election could not start.
#[derive(Debug, thiserror::Error)]
#[error("leader election on Lease {namespace}/{name}: {source}")]
pub struct LeaderError {
    namespace: String,
    name: String,
    source: kube_lease_manager::LeaseManagerError,
}

/// Starts competing for Lease `name` in `namespace`; the task runs until the process ends.
pub async fn elect(
    client: Client,
    namespace: &str,
    name: &str,
    identity: &str,
    duration_seconds: u64,
) -> Result<Leadership, LeaderError> {
    let manager = LeaseManagerBuilder::new(client, name)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(duration_seconds)
        .with_grace(duration_seconds.div_ceil(6).max(1))
        .build()
        .await
        .map_err(|source| LeaderError {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        })?;
    let (state, task) = manager.watch().await;
    tokio::spawn(async move {
        match task.await {
            Ok(Ok(manager)) => {
                // Every Leadership handle is gone: the manager is stopping. Hand the Lease over
                // now instead of letting the others wait for it to expire.
                match manager.release().await {
                    Ok(()) => tracing::info!("leader election stopped; Lease released"),
                    Err(error) => tracing::warn!(%error, "could not release the Lease"),
                }
            }
            Ok(Err(error)) => tracing::error!(%error, "leader election failed; this replica stops writing"),
            Err(error) => tracing::error!(%error, "leader election task panicked"),
        }
    });
    Ok(Leadership::from_channel(state))
}
