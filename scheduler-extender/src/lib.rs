//! # koord-scheduler-extender
//!
//! A kube-scheduler extender for colocation: the stock kube-scheduler, run by the chart under
//! the scheduler name `koord-scheduler`, calls it to filter and prioritize nodes. BE pods are
//! kept off nodes whose batch resources are degraded and spread by remaining batch capacity and
//! real load; other pods are spread by real load as upstream's LoadAware plugin does. See the
//! README for why this is a binary of its own and for its flags.

pub mod cli;
pub mod cluster;
pub mod decide;
pub mod extender;
pub mod facts;
pub mod ledger;
pub mod metrics;
pub mod serve;
pub mod server;
pub mod table;
pub mod tls;
pub mod wire;
