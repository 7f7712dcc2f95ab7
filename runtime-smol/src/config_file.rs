//! Reading user configuration files (placeholder; being written).
