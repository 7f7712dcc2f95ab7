//! The commands a person runs beside serving: `check`, `status`, `restart`,
//! `reconnect`, `logs`, `auth`, `import`, `replay`, `demo`. They use serving only
//! through [`crate::serve`]'s re-exports (a configuration, a [`crate::serve::Host`]
//! and its reports) and a running tether only through its control channel or
//! HTTP endpoints.

pub mod auth;
pub mod check;
pub mod control;
pub mod demo;
pub mod import;
pub mod replay;
pub mod status;
