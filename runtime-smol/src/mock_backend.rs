//! A built-in mock MCP server (placeholder; being written).
