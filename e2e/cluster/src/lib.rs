//! # koord-testcluster: an embedded Kubernetes API server for tests and demos
//!
//! No real cluster runs on the build machines, yet the components talk to each other only
//! through the Kubernetes API. This crate serves that API in-process on loopback (see
//! `e2e/README.md` for what it implements and what it does not), so the unmodified kube-rs
//! clients of the real components, and kubectl, can be driven against it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), koord_testcluster::ClusterError> {
//! use koord_testcluster::{ClusterOptions, TestCluster};
//! let cluster = TestCluster::start(ClusterOptions::default()).await?;
//! let client = cluster.client()?;
//! cluster.write_kubeconfig("/tmp/kubeconfig")?;
//! # drop(client); Ok(()) }
//! ```
//!
//! Simulated nodes whose pods run as real processes in real cgroups: [`node::SimulatedNodes`].

pub mod apiserver;
pub mod cluster;
pub mod node;

pub use apiserver::tls::SelfSignedCert;
pub use apiserver::{ApiError, ApiServer};
pub use cluster::{ClusterError, ClusterOptions, EvictionApi, TestCluster, parse_documents};
