//! tether-smol: the async runtime that drives `tether-core` with smol.
//!
//! Not built yet (issue 3): the crate exists so the workspace has its final shape.
