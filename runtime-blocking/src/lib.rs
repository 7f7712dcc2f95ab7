//! tether-blocking: drives `tether-core` on plain std threads.
//!
//! Not built yet (issue 8): the crate exists so the workspace has its final shape.
