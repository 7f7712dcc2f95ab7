//! Catalogs are bounded in bytes, per backend and in all: a backend that lists
//! more is cut (the rest is not even asked for), with an event and a status
//! note saying which limit cut it; tools re-listed on `list_changed` keep the
//! other lists as they were.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::{Config, Event, ServerConfig};

/// A page of `n` tools named `{prefix}{i}`, each about `pad` bytes, and a cursor.
fn page(prefix: &str, n: usize, pad: usize, cursor: Option<&str>) -> Value {
    let tools: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("{prefix}{i}"), "description": "d".repeat(pad), "inputSchema": {"type":"object"}}))
        .collect();
    match cursor {
        Some(c) => json!({ "tools": tools, "nextCursor": c }),
        None => json!({ "tools": tools }),
    }
}

fn config(per_backend: u32, total: u32) -> Config {
    let mut config = Config::default()
        .server("big", ServerConfig::stdio("big-server", &[]))
        .server("small", ServerConfig::stdio("small-server", &[]));
    config.limits.max_catalog_bytes = per_backend;
    config.limits.max_total_catalog_bytes = total;
    config
}

fn handshake(sim: &mut Sim, server: &str) {
    let caps = json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":server,"version":"1"}});
    sim.answer(server, "initialize", caps);
}

/// The tool names a `tools/list` of session 1 shows (request `id`).
fn tool_names(sim: &mut Sim, id: u64) -> Vec<String> {
    sim.client(json!({"jsonrpc":"2.0","id":id,"method":"tools/list"}));
    let tools = sim.response(id)["result"]["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect()
}

fn cuts(sim: &Sim) -> Vec<String> {
    events(sim)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Event::CatalogCut { server, detail } => Some(format!("{server}: {detail}")),
            _ => None,
        })
        .collect()
}

#[test]
fn a_backend_listing_more_than_its_bound_is_cut_and_its_later_pages_are_not_asked_for() {
    let mut sim = Sim::new(config(10_000, 1_000_000));
    handshake(&mut sim, "small");
    sim.answer_tools("small", &["read"]);
    handshake(&mut sim, "big");
    // Tools of about 1 KiB: the bound keeps 9 of the first page's 20.
    sim.answer("big", "tools/list", page("t", 20, 1000, Some("next")));
    assert_eq!(sim.requests_to("big", "tools/list").len(), 1, "the second page is not asked for");
    sim.client_init();
    let names = tool_names(&mut sim, 1);
    let big: Vec<&String> = names.iter().filter(|n| n.starts_with("big__")).collect();
    assert_eq!(big.len(), 9, "{names:?}");
    assert!(names.contains(&"small__read".to_string()));
    let cut = cuts(&sim);
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert!(cut[0].starts_with("big: catalog cut at ") && cut[0].contains("limits.max_catalog_bytes"), "{cut:?}");
    let note = sim.gw.status("big").unwrap().catalog_note.expect("a status note");
    assert!(note.contains("limits.max_catalog_bytes"), "{note}");
    assert_eq!(sim.gw.status("small").unwrap().catalog_note, None);
}

#[test]
fn the_total_bound_leaves_a_later_backend_what_the_others_do_not_hold() {
    let mut sim = Sim::new(config(1_000_000, 12_000));
    handshake(&mut sim, "big");
    sim.answer("big", "tools/list", page("t", 10, 1000, None));
    handshake(&mut sim, "small");
    sim.answer("small", "tools/list", page("s", 5, 1000, None));
    sim.client_init();
    let names = tool_names(&mut sim, 1);
    assert_eq!(names.iter().filter(|n| n.starts_with("big__")).count(), 10, "{names:?}");
    assert_eq!(names.iter().filter(|n| n.starts_with("small__")).count(), 1, "{names:?}");
    let cut = cuts(&sim);
    assert!(cut.len() == 1 && cut[0].starts_with("small:") && cut[0].contains("max_total_catalog_bytes"), "{cut:?}");

    sim.note("big re-lists its tools, fewer now: the room is small's again at its next discovery");
    sim.backend("big", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer("big", "tools/list", page("t", 2, 1000, None));
    sim.backend("small", json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
    sim.answer("small", "tools/list", page("s", 5, 1000, None));
    let names = tool_names(&mut sim, 2);
    assert_eq!(names.iter().filter(|n| n.starts_with("small__")).count(), 5, "{names:?}");
    assert_eq!(sim.gw.status("small").unwrap().catalog_note, None, "the note goes when the cut does");
}

/// A backend still paging after `max_discovery_pages` pages keeps what those pages
/// held, and says it was cut (it used to end there with no word).
#[test]
fn a_backend_still_paging_at_the_page_bound_is_cut_with_an_event() {
    let mut config = config(1_000_000, 1_000_000);
    config.limits.max_discovery_pages = 2;
    let mut sim = Sim::new(config);
    handshake(&mut sim, "small");
    sim.answer_tools("small", &["read"]);
    handshake(&mut sim, "big");
    sim.answer("big", "tools/list", page("a", 3, 10, Some("p2")));
    sim.answer("big", "tools/list", page("b", 3, 10, Some("p3")));
    assert_eq!(sim.requests_to("big", "tools/list").len(), 2, "no third page");
    sim.client_init();
    let names = tool_names(&mut sim, 1);
    assert_eq!(names.iter().filter(|n| n.starts_with("big__")).count(), 6, "{names:?}");
    let cut = cuts(&sim);
    assert!(cut.len() == 1 && cut[0].contains("limits.max_discovery_pages"), "{cut:?}");
    assert!(sim.gw.status("big").unwrap().catalog_note.is_some_and(|n| n.contains("max_discovery_pages")));
}
