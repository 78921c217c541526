//! The embedded Kubernetes API server: in-memory storage, REST semantics, watch, patches,
//! admission webhooks and discovery, served over HTTP(S) by axum.

pub mod admission;
pub mod discovery;
pub mod error;
pub mod field_validation;
pub mod http;
pub mod kinds;
pub mod object;
pub mod openapi;
pub mod ops;
pub mod partial;
pub mod patch;
pub mod pods;
pub mod proto;
pub mod quantities;
pub mod resource;
pub mod schema;
pub mod schema_validation;
pub mod selector;
pub mod server;
pub mod store;
pub mod table;
pub mod tls;
pub mod watch;

pub use error::{ApiError, ApiResult};
pub use server::ApiServer;
