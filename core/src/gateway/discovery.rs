//! Listing what a backend offers: one machine per discovery, which takes the
//! pages of each list as they come, keeps them within the catalog bounds, says
//! which page to ask for next, and hands the lists over when every page is in.
//! It sends nothing and touches no catalog: the gateway asks for the pages it
//! names and installs what [`Discovery::finish`] returns.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::catalog::ListKind;
use crate::protocol::CacheHint;

/// The bounds a discovery keeps to (from the configuration's `limits`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Bounds {
    /// Items kept per list.
    pub max_items: usize,
    /// Pages asked for per list.
    pub max_pages: u32,
    /// The per-backend byte bound (to name which bound cut a list).
    pub max_catalog_bytes: u64,
}

/// What to do after a page or a failure.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Ask for this list's next page, at this cursor.
    Page(String),
    /// Other pages are still out.
    Wait,
    /// Every page is in: [`Discovery::finish`].
    Finished,
}

/// A discovery in progress: lists accumulate here until every page is in.
#[derive(Clone, Debug, Default)]
pub(super) struct Discovery {
    /// Kinds being re-listed (bit `1 << kind`); the others keep their last lists.
    requested: u8,
    /// Each list's items as listed (raw JSON objects), and their bytes.
    lists: [Vec<Box<str>>; 4],
    bytes: [u64; 4],
    /// Bytes this discovery may keep in all (its backend's bound, or what the
    /// others leave of the total).
    room: u64,
    /// Which limit left items out, if one did.
    cut: Option<&'static str>,
    /// Each list's cache hint: the shortest-lived of its pages.
    cache: [Option<CacheHint>; 4],
    outstanding: u32,
    failed: bool,
}

/// A finished discovery, for the gateway to install.
#[derive(Debug)]
pub(super) struct Finished {
    /// Some list failed: install nothing (a first discovery that fails is a
    /// failed connection; a re-discovery keeps the catalog it had).
    pub failed: bool,
    /// The re-listed kinds' items (`None`: that kind was not re-listed).
    pub lists: [Option<Vec<Box<str>>>; 4],
    /// Their cache hints (for the re-listed kinds).
    pub cache: [CacheHint; 4],
    /// Their bytes.
    pub bytes: [u64; 4],
    /// The bound that cut a list, if one did.
    pub cut: Option<&'static str>,
}

impl Discovery {
    /// A discovery of the kinds in `requested` that may keep `room` bytes.
    pub(super) fn new(requested: u8, room: u64) -> Discovery {
        Discovery { requested, room, ..Discovery::default() }
    }

    /// A page request went out.
    pub(super) fn asked(&mut self) {
        self.outstanding += 1;
    }

    /// The answer to page `pages` (1-based) of `kind`'s list. `answer` is the
    /// result's JSON or the error's; `had_catalog`: the backend was discovered
    /// before (an error then keeps the old catalog instead of failing).
    pub(super) fn on_page(
        &mut self,
        kind: ListKind,
        pages: u32,
        answer: Result<&str, &str>,
        had_catalog: bool,
        bounds: Bounds,
    ) -> Next {
        self.outstanding = self.outstanding.saturating_sub(1);
        // Only the page's members are parsed here; each item stays its raw text
        // (parsed one at a time when the catalog is built), so a large page is
        // never held as a tree of values.
        let page = answer.ok().and_then(|r| serde_json::from_str::<BTreeMap<String, &RawValue>>(r).ok());
        match page {
            Some(page) => {
                if let Some(cursor) = self.take_page(kind, pages, &page, bounds) {
                    return Next::Page(cursor);
                }
            }
            // An error for one list (even an announced one) leaves that list empty on a
            // first discovery; a re-discovery that gets one keeps the cached catalog.
            None if answer.is_err() => self.failed |= had_catalog,
            None => self.failed = true,
        }
        self.settled()
    }

    /// A page request timed out or its connection failed.
    pub(super) fn on_failure(&mut self) -> Next {
        self.outstanding = self.outstanding.saturating_sub(1);
        self.failed = true;
        self.settled()
    }

    /// The lists, for the gateway to install.
    pub(super) fn finish(self) -> Finished {
        let mut lists: [Option<Vec<Box<str>>>; 4] = Default::default();
        let mut cache = [CacheHint::STALE; 4];
        for (kind, list) in ListKind::ALL.into_iter().zip(self.lists) {
            if self.requested & kind_bit(kind) != 0 {
                cache[kind as usize] = self.cache[kind as usize].unwrap_or(CacheHint::STALE);
                lists[kind as usize] = Some(list);
            }
        }
        Finished { failed: self.failed, lists, cache, bytes: self.bytes, cut: self.cut }
    }

    fn settled(&self) -> Next {
        if self.outstanding == 0 {
            Next::Finished
        } else {
            Next::Wait
        }
    }

    /// Keeps a page's items within the bounds; the cursor of the next page when
    /// there is one to ask for.
    fn take_page(
        &mut self,
        kind: ListKind,
        pages: u32,
        page: &BTreeMap<String, &RawValue>,
        bounds: Bounds,
    ) -> Option<String> {
        let small: Map<String, Value> = ["ttlMs", "cacheScope"]
            .iter()
            .filter_map(|key| Some((key.to_string(), serde_json::from_str(page.get(*key)?.get()).ok()?)))
            .collect();
        let hint = CacheHint::of(&small);
        let cached = &mut self.cache[kind as usize];
        *cached = Some(cached.map_or(hint, |h| h.and(hint)));
        let items = page.get(kind.result_key()).and_then(|raw| serde_json::from_str::<Vec<&RawValue>>(raw.get()).ok());
        for item in items.unwrap_or_default() {
            let text = item.get();
            if !text.starts_with('{') {
                continue;
            }
            let held: u64 = self.bytes.iter().sum();
            if self.lists[kind as usize].len() >= bounds.max_items {
                self.cut.get_or_insert("limits.max_catalog_items");
                break;
            }
            if held + text.len() as u64 > self.room {
                self.cut.get_or_insert(if self.room < bounds.max_catalog_bytes {
                    "limits.max_total_catalog_bytes"
                } else {
                    "limits.max_catalog_bytes"
                });
                break;
            }
            self.bytes[kind as usize] += text.len() as u64;
            self.lists[kind as usize].push(text.into());
        }
        let cursor = page.get("nextCursor").and_then(|c| serde_json::from_str::<String>(c.get()).ok())?;
        // Past a limit, the rest is not asked for, and the catalog says so.
        if cursor.is_empty() || self.cut.is_some() {
            return None;
        }
        if pages < bounds.max_pages {
            Some(cursor)
        } else {
            self.cut.get_or_insert("limits.max_discovery_pages");
            None
        }
    }
}

/// Every list kind, as a discovery mask.
pub(super) const ALL_KINDS: u8 = 0b1111;

/// The discovery-mask bit of one list kind.
pub(super) fn kind_bit(kind: ListKind) -> u8 {
    1 << (kind as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    const BOUNDS: Bounds = Bounds { max_items: 5, max_pages: 3, max_catalog_bytes: 1_000 };

    fn page(names: &[&str], cursor: Option<&str>) -> String {
        let tools: Vec<String> = names.iter().map(|n| format!(r#"{{"name":"{n}"}}"#)).collect();
        match cursor {
            Some(c) => format!(r#"{{"tools":[{}],"nextCursor":"{c}"}}"#, tools.join(",")),
            None => format!(r#"{{"tools":[{}]}}"#, tools.join(",")),
        }
    }

    fn tools(finished: &Finished) -> Vec<&str> {
        finished.lists[ListKind::Tools as usize].as_ref().unwrap().iter().map(|t| &**t).collect()
    }

    #[test]
    fn pages_are_followed_until_the_last_and_then_handed_over() {
        let mut d = Discovery::new(kind_bit(ListKind::Tools), 1_000);
        d.asked();
        assert_eq!(
            d.on_page(ListKind::Tools, 1, Ok(&page(&["a", "b"], Some("c2"))), false, BOUNDS),
            Next::Page("c2".into())
        );
        d.asked();
        assert_eq!(d.on_page(ListKind::Tools, 2, Ok(&page(&["c"], None)), false, BOUNDS), Next::Finished);
        let done = d.finish();
        assert!(!done.failed && done.cut.is_none());
        assert_eq!(tools(&done), [r#"{"name":"a"}"#, r#"{"name":"b"}"#, r#"{"name":"c"}"#]);
        assert!(done.lists[ListKind::Prompts as usize].is_none(), "prompts were not re-listed");
    }

    #[test]
    fn each_bound_cuts_the_list_says_so_and_asks_for_no_more() {
        // Items.
        let mut d = Discovery::new(kind_bit(ListKind::Tools), 1_000);
        d.asked();
        let six = ["a", "b", "c", "d", "e", "f"];
        assert_eq!(d.on_page(ListKind::Tools, 1, Ok(&page(&six, Some("n"))), false, BOUNDS), Next::Finished);
        let done = d.finish();
        assert_eq!((tools(&done).len(), done.cut), (5, Some("limits.max_catalog_items")));
        // Bytes: the backend's own bound, or the total's share.
        for (room, limit) in [(1_000, "limits.max_catalog_bytes"), (30, "limits.max_total_catalog_bytes")] {
            let mut d = Discovery::new(kind_bit(ListKind::Tools), room);
            d.asked();
            let long = "x".repeat(600);
            d.on_page(ListKind::Tools, 1, Ok(&page(&[&long, &long], None)), false, BOUNDS);
            assert_eq!(d.finish().cut, Some(limit));
        }
        // Pages.
        let mut d = Discovery::new(kind_bit(ListKind::Tools), 1_000);
        d.asked();
        assert_eq!(d.on_page(ListKind::Tools, 3, Ok(&page(&["a"], Some("more"))), false, BOUNDS), Next::Finished);
        assert_eq!(d.finish().cut, Some("limits.max_discovery_pages"));
    }

    #[test]
    fn an_error_fails_a_re_discovery_but_only_empties_a_list_of_a_first_one() {
        let both = kind_bit(ListKind::Tools) | kind_bit(ListKind::Prompts);
        let mut first = Discovery::new(both, 1_000);
        first.asked();
        first.asked();
        assert_eq!(first.on_page(ListKind::Prompts, 1, Err(r#"{"code":-32601}"#), false, BOUNDS), Next::Wait);
        assert_eq!(first.on_page(ListKind::Tools, 1, Ok(&page(&["a"], None)), false, BOUNDS), Next::Finished);
        let done = first.finish();
        assert!(!done.failed);
        assert_eq!(done.lists[ListKind::Prompts as usize].as_deref(), Some(&[][..]));

        let mut again = Discovery::new(both, 1_000);
        again.asked();
        assert_eq!(again.on_page(ListKind::Prompts, 1, Err("{}"), true, BOUNDS), Next::Finished);
        assert!(again.finish().failed, "a re-discovery keeps the catalog it had");

        let mut lost = Discovery::new(both, 1_000);
        lost.asked();
        lost.asked();
        assert_eq!(lost.on_failure(), Next::Wait);
        assert_eq!(lost.on_page(ListKind::Tools, 1, Ok("not json"), false, BOUNDS), Next::Finished);
        assert!(lost.finish().failed);
    }

    #[test]
    fn a_list_keeps_the_shortest_lived_cache_hint_of_its_pages() {
        let mut d = Discovery::new(kind_bit(ListKind::Tools), 1_000);
        d.asked();
        let first = r#"{"tools":[],"ttlMs":60000,"nextCursor":"2"}"#;
        assert_eq!(d.on_page(ListKind::Tools, 1, Ok(first), false, BOUNDS), Next::Page("2".into()));
        d.asked();
        d.on_page(ListKind::Tools, 2, Ok(r#"{"tools":[],"ttlMs":5000}"#), false, BOUNDS);
        let mut expected = Map::new();
        expected.insert("ttlMs".into(), Value::from(5000));
        assert_eq!(d.finish().cache[ListKind::Tools as usize], CacheHint::of(&expected));
    }
}
