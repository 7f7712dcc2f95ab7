//! tether-tests: end-to-end tests and mock backends (issue 3 fills this in).
