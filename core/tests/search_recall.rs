//! Recall of meta mode's `search_tools` on real catalogs: requests phrased as an
//! agent would ask them, from what a tool is for rather than from its name, over
//! the captured catalogs of server-everything, server-filesystem, server-memory
//! and mcp-server-time (`tests/fixtures/tool-catalogs/`). Fails if recall@3 (the
//! share of requests whose right tool is among the first three) drops under
//! [`FLOOR`]. `cargo test -p tether-core --test search_recall -- --nocapture`
//! prints the figure and the requests missed.

use std::path::PathBuf;

use serde_json::Value;
use tether_core::catalog::served_name;
use tether_core::tool_search::{self, Searchable};

/// The catalogs searched, by the backend name they are served under.
const SERVERS: [&str; 4] = ["everything", "filesystem", "memory", "time"];

/// The lowest recall@3 accepted. Measured: 0.907 (39 of 43); keyword scoring
/// before BM25F, stemming and equivalents: 0.651 (28 of 43).
const FLOOR: f64 = 0.88;

/// Requests, and the served names that count as a right answer.
const CASES: &[(&str, &[&str])] = &[
    // server-memory: a knowledge graph of entities, relations and observations.
    ("remember a fact about a person", &["memory__add_observations", "memory__create_entities"]),
    ("what do you know about Alice", &["memory__search_nodes", "memory__open_nodes", "memory__read_graph"]),
    ("store a new person in long-term memory", &["memory__create_entities"]),
    ("record that Bob works with Carol", &["memory__create_relations"]),
    ("link two people together", &["memory__create_relations"]),
    ("forget everything about a person", &["memory__delete_entities"]),
    ("one detail you noted about John is wrong, remove it", &["memory__delete_observations"]),
    ("they no longer know each other, drop that connection", &["memory__delete_relations"]),
    ("dump everything you have memorized", &["memory__read_graph"]),
    ("look up someone by name in what you remember", &["memory__search_nodes", "memory__open_nodes"]),
    ("add a note to someone I already told you about", &["memory__add_observations"]),
    // server-filesystem.
    ("look at a picture file", &["filesystem__read_media_file"]),
    ("load an audio recording", &["filesystem__read_media_file"]),
    (
        "show me what is in this folder",
        &["filesystem__list_directory", "filesystem__list_directory_with_sizes", "filesystem__directory_tree"],
    ),
    ("open a document and show its contents", &["filesystem__read_text_file", "filesystem__read_file"]),
    ("read several documents at once", &["filesystem__read_multiple_files"]),
    ("save this text to disk as a new document", &["filesystem__write_file"]),
    ("change one line in a config file", &["filesystem__edit_file"]),
    ("make a new folder", &["filesystem__create_directory"]),
    ("rename a document", &["filesystem__move_file"]),
    ("which folders am I allowed to touch", &["filesystem__list_allowed_directories"]),
    ("find all markdown files under a path", &["filesystem__search_files"]),
    (
        "how big is this file and when was it last changed",
        &["filesystem__get_file_info", "filesystem__list_directory_with_sizes"],
    ),
    ("show the whole nested folder structure", &["filesystem__directory_tree"]),
    ("which files in this directory take the most space", &["filesystem__list_directory_with_sizes"]),
    // mcp-server-time.
    ("what time is it in Tokyo", &["time__get_current_time"]),
    ("what's the date today", &["time__get_current_time"]),
    ("if it is 3pm in London what time is it in New York", &["time__convert_time"]),
    ("translate a meeting time into another timezone", &["time__convert_time"]),
    // server-everything: a test server's demonstrations.
    ("repeat back what I say", &["everything__echo"]),
    ("add two numbers together", &["everything__get-sum"]),
    ("show me the environment variables", &["everything__get-env"]),
    ("run a slow task that reports its progress", &["everything__trigger-long-running-operation"]),
    ("shrink a file into a compressed archive", &["everything__gzip-file-as-resource"]),
    ("ask the user a question through the client", &["everything__trigger-elicitation-request"]),
    ("have the client's language model write something", &["everything__trigger-sampling-request"]),
    ("start or stop emitting fake log messages", &["everything__toggle-simulated-logging"]),
    ("which root directories did the client share", &["everything__get-roots-list"]),
    ("give me a small sample image", &["everything__get-tiny-image"]),
    ("do some in-depth research on a topic", &["everything__simulate-research-query"]),
    ("notify me when subscribed resources change", &["everything__toggle-subscriber-updates"]),
    ("get weather for a city as typed JSON with a schema", &["everything__get-structured-content"]),
    ("a message carrying priority and audience metadata", &["everything__get-annotated-message"]),
];

/// The tools of one captured catalog, as the gateway's catalog holds them: the
/// tool's JSON with its served name (`server__tool`) in `name`.
fn load(server: &str) -> Vec<(&str, Value)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/tool-catalogs")
        .join(format!("{server}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let fixture: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let tools = fixture["result"]["tools"].as_array().cloned().unwrap_or_default();
    assert!(!tools.is_empty(), "{}: no tools in result.tools", path.display());
    tools
        .into_iter()
        .map(|mut tool| {
            let original = tool["name"].as_str().unwrap_or_default().to_string();
            tool["name"] = Value::String(served_name(&format!("{server}__{original}")));
            (server, tool)
        })
        .collect()
}

#[test]
fn recall_at_3_over_real_catalogs_stays_above_the_floor() {
    let parsed: Vec<(&str, Value)> = SERVERS.iter().flat_map(|s| load(s)).collect();
    let tools: Vec<Searchable<'_>> =
        parsed.iter().map(|(server, tool)| tool_search::searchable(server, tool)).collect();
    for (query, right) in CASES {
        for name in *right {
            assert!(tools.iter().any(|t| t.name == *name), "{query:?}: no tool {name} in the catalogs");
        }
    }
    let mut found = 0;
    for (query, right) in CASES {
        let hits = tool_search::rank(&tools, query, 5);
        if hits.iter().take(3).any(|h| right.contains(&tools[h.index].name)) {
            found += 1;
        } else {
            let top: Vec<String> = hits.iter().map(|h| format!("{} {}", tools[h.index].name, h.score)).collect();
            println!("missed {query:?}: wanted one of {right:?}, got {top:?}");
        }
    }
    let recall = found as f64 / CASES.len() as f64;
    println!("recall@3: {found}/{} = {recall:.3} over {} tools (floor {FLOOR})", CASES.len(), tools.len());
    assert!(recall >= FLOOR, "recall@3 {recall:.3} fell under the floor {FLOOR}");
}
