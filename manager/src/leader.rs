//! Leader election: every replica watches and computes; only the Lease holder writes.

use std::time::Duration;

use futures::{Stream, StreamExt, stream};
use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
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

    /// Yields whether this replica leads now, then again at every change; ends when the
    /// election task ends (the replica no longer leads).
    pub fn states(&self) -> impl Stream<Item = bool> + Send + 'static {
        let mut state = self.state.clone();
        let now = *state.borrow_and_update();
        stream::once(futures::future::ready(now)).chain(stream::unfold(state, |mut state| async move {
            state.changed().await.ok()?;
            let leads = *state.borrow_and_update();
            Some((leads, state))
        }))
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

/// Where and as whom to compete.
#[derive(Clone)]
struct Candidate {
    client: Client,
    namespace: String,
    name: String,
    identity: String,
    duration_seconds: u64,
}

impl Candidate {
    async fn manager(&self) -> Result<LeaseManager, LeaderError> {
        LeaseManagerBuilder::new(self.client.clone(), &self.name)
            .with_namespace(&self.namespace)
            .with_identity(&self.identity)
            .with_duration(self.duration_seconds)
            .with_grace(self.duration_seconds.div_ceil(6).max(1))
            .build()
            .await
            .map_err(|source| LeaderError {
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                source,
            })
    }
}

/// Longest wait between two attempts to reach the Lease after an error.
const MAX_RETRY: Duration = Duration::from_secs(10);

/// Competes until every [`Leadership`] handle is gone, then releases the Lease.
///
/// kube-lease-manager keeps reporting the last state while the API server is unreachable, so a
/// leader cut off from it would believe it still leads after another replica took over. Here
/// any error steps down at once (the holder renews a grace period before expiry, so it stops
/// writing before anyone else may start); a fresh manager then re-reads the Lease from
/// scratch and reports leadership again only if this replica still holds it.
///
/// An outage is logged once: a warning when it starts (saying whether this replica stepped
/// down), debug lines for the retries, and one line when the Lease answers again.
async fn campaign(candidate: Candidate, mut manager: LeaseManager, state: watch::Sender<bool>) {
    let mut retry = Duration::from_secs(1);
    let mut failing = false;
    loop {
        tokio::select! {
            biased;
            () = state.closed() => break,
            result = manager.changed() => match result {
                Ok(leader) => {
                    if failing {
                        tracing::info!(leader, "leader election: the Lease answers again");
                        failing = false;
                    }
                    retry = Duration::from_secs(1);
                    state.send_replace(leader);
                }
                Err(error) => {
                    if state.send_replace(false) {
                        tracing::warn!(%error, "cannot confirm the Lease: stepped down, no more writes until it is confirmed");
                    } else if !failing {
                        tracing::warn!(%error, "leader election: cannot reach the Lease; retrying (backoff up to {} s)", MAX_RETRY.as_secs());
                    } else {
                        tracing::debug!(%error, "leader election: still cannot reach the Lease");
                    }
                    failing = true;
                    tokio::select! {
                        () = state.closed() => break,
                        () = tokio::time::sleep(retry) => {}
                    }
                    retry = (retry * 2).min(MAX_RETRY);
                    match candidate.manager().await {
                        Ok(fresh) => manager = fresh,
                        Err(error) => tracing::debug!(%error, "leader election: still cannot reach the Lease"),
                    }
                }
            },
        }
    }
    // Every Leadership handle is gone: the manager is stopping. Hand the Lease over now
    // instead of letting the others wait for it to expire.
    match manager.release().await {
        Ok(()) => tracing::info!("leader election stopped; Lease released"),
        Err(error) => tracing::warn!(%error, "could not release the Lease"),
    }
}

/// Starts competing for Lease `name` in `namespace`; the task runs until the process ends.
pub async fn elect(
    client: Client,
    namespace: &str,
    name: &str,
    identity: &str,
    duration_seconds: u64,
) -> Result<Leadership, LeaderError> {
    let candidate = Candidate {
        client,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        identity: identity.to_owned(),
        duration_seconds,
    };
    let manager = candidate.manager().await?;
    let (sender, state) = watch::channel(false);
    tokio::spawn(campaign(candidate, manager, sender));
    Ok(Leadership::from_channel(state))
}
