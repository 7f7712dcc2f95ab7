//! Tests of the tool search: words, stems, equivalents, scoring, order.

use super::*;
use alloc::vec;

fn tool<'a>(name: &'a str, server: &'a str, description: &'a str, params: &[&'a str]) -> Searchable<'a> {
    Searchable {
        name,
        server,
        description,
        params: params.iter().map(|p| (*p, "")).collect(),
        ..Searchable::default()
    }
}

fn names(tools: &[Searchable<'_>], query: &str) -> Vec<String> {
    rank(tools, query, 10).iter().map(|h| String::from(tools[h.index].name)).collect()
}

fn stem_of(word: &str) -> String {
    stemmed(word)
}

#[test]
fn words_split_at_separators_and_camel_case() {
    assert_eq!(words("fs__read_file"), vec!["fs", "read", "file"]);
    assert_eq!(words("getTinyImage v2"), vec!["get", "tiny", "image", "v2"]);
    assert_eq!(words("HTTPServer"), vec!["httpserver"]);
    assert_eq!(words("  "), Vec::<String>::new());
}

#[test]
fn the_tool_named_by_the_query_ranks_first_and_ties_break_by_name() {
    let tools = vec![
        tool("fs__write_file", "fs", "Write a file to disk", &["path", "content"]),
        tool("fs__read_file", "fs", "Read the complete contents of a file", &["path"]),
        tool("memory__read_graph", "memory", "Read the entire knowledge graph", &[]),
        tool("everything__echo", "everything", "Echoes back the input", &["message"]),
    ];
    assert_eq!(names(&tools, "read file"), vec!["fs__read_file", "fs__write_file", "memory__read_graph"]);
    assert_eq!(names(&tools, "echo a message"), vec!["everything__echo"]);
    assert_eq!(names(&tools, "knowledge"), vec!["memory__read_graph"]);
    assert_eq!(names(&tools, "memory"), vec!["memory__read_graph"]);
    assert!(names(&tools, "weather forecast").is_empty());
    // Nothing but stop words: they are searched for after all (the shorter
    // description, where the word weighs more, first).
    assert_eq!(names(&tools, "the"), vec!["everything__echo", "memory__read_graph", "fs__read_file"]);
    // Empty: everything, by name.
    assert_eq!(names(&tools, "")[0], "everything__echo");
    assert_eq!(rank(&tools, "", 2).len(), 2);
    // Two tools alike but for their names: equal scores, ordered by name.
    let twins = vec![tool("b__copy", "b", "Copy a file", &[]), tool("a__copy", "a", "Copy a file", &[])];
    let hits = rank(&twins, "copy", 10);
    assert_eq!(hits[0].score, hits[1].score);
    assert!(hits[0].score > 0);
    assert_eq!(names(&twins, "copy"), vec!["a__copy", "b__copy"]);
}

#[test]
fn a_query_word_matches_the_start_of_longer_words_for_less() {
    let tools = vec![
        tool("a__authentication", "a", "", &[]),
        tool("b__auth", "b", "", &[]),
        tool("c__other", "c", "checks authentications", &[]),
    ];
    assert_eq!(names(&tools, "auth"), vec!["b__auth", "a__authentication", "c__other"]);
    // Too short to be taken for the start of another word.
    assert!(names(&[tool("x__logo", "x", "", &[])], "log").is_empty());
}

#[test]
fn stemming_gives_forms_of_a_word_one_stem() {
    let same: &[&[&str]] = &[
        &["entity", "entities"],
        &["directory", "directories"],
        &["list", "lists", "listing", "listed"],
        &["create", "creates", "created", "creating", "creation"],
        &["write", "writes", "writing"],
        &["file", "files", "filed"],
        &["note", "notes", "noted"],
        &["change", "changes", "changed", "changing"],
        &["observe", "observation", "observations", "observed"],
        &["relate", "relation", "relations", "related"],
        &["connect", "connection", "connections", "connected"],
        &["delete", "deletes", "deleted", "deletion"],
        &["run", "runs", "running"],
        &["search", "searches", "searched", "searching"],
        &["compress", "compresses", "compressed", "compression"],
        &["convert", "converter", "converting"],
        &["image", "images"],
        &["query", "queries", "queried"],
        &["annotate", "annotated", "annotation"],
        &["size", "sizes", "sized"],
        &["format", "formatter"],
    ];
    for forms in same {
        let stems: Vec<String> = forms.iter().map(|w| stem_of(w)).collect();
        assert!(stems.iter().all(|s| *s == stems[0]), "{forms:?} → {stems:?}");
    }
    // Conservative: distinct words stay distinct, short words and non-ASCII alone.
    let apart: &[(&str, &str)] =
        &[("note", "not"), ("server", "serve"), ("folder", "fold"), ("version", "verse"), ("status", "stat")];
    for (a, b) in apart {
        assert_ne!(stem_of(a), stem_of(b), "{a} and {b}");
    }
    assert_eq!(stem_of("bus"), "bus");
    assert_eq!(stem_of("process"), "process");
    assert_eq!(stem_of("string"), "string");
    assert_eq!(stem_of("größen"), "größen");
    assert_eq!(stem_of("v2s"), "v2s");
}

#[test]
fn stemming_matches_a_request_to_other_forms_of_its_words() {
    let tools = vec![
        tool("kg__create_entities", "kg", "Create multiple new entities", &[]),
        tool("kg__read_graph", "kg", "Read the graph", &[]),
    ];
    assert_eq!(names(&tools, "creating an entity"), vec!["kg__create_entities"]);
}

#[test]
fn equivalents_cover_forms_and_leave_the_word_out() {
    let folder = equivalents(&stem_of("folder"));
    assert!(folder.contains(&stem_of("directory")) && folder.contains(&String::from("dir")), "{folder:?}");
    assert!(!folder.contains(&stem_of("folder")));
    // Found by any form of the word: "pictures" is "picture".
    assert!(equivalents(&stem_of("pictures")).contains(&stem_of("image")));
    assert!(equivalents("zzz").is_empty());
    // Every word of the table is a word of its own (no separators inside).
    for group in EQUIVALENTS {
        for w in *group {
            assert_eq!(words(w), vec![String::from(*w)], "{w}");
        }
    }
}

#[test]
fn an_equivalent_finds_a_tool_for_less_than_the_word_itself() {
    let tools = vec![
        tool("fs__list_directory", "fs", "List the entries of a directory", &["path"]),
        tool("fs__folder_info", "fs", "About a folder", &["path"]),
        tool("fs__read_file", "fs", "Read a file", &["path"]),
    ];
    // "folder" finds the folder tool directly and the directory tool by equivalence.
    assert_eq!(names(&tools, "folder"), vec!["fs__folder_info", "fs__list_directory"]);
    // Two request words each found through an equivalent beat one found directly.
    assert_eq!(names(&tools, "show folder")[0], "fs__list_directory");
}

#[test]
fn a_request_word_counts_once_by_its_best_form() {
    // `read` and its equivalents `open`, `load`, `view` all in one tool's name
    // must not outweigh `read` plus the request's other word.
    let tools = vec![
        tool("a__open_load_view", "a", "", &[]),
        tool("b__read_note", "b", "", &[]),
        tool("c__x", "c", "", &[]),
    ];
    assert_eq!(names(&tools, "read note")[0], "b__read_note");
}

#[test]
fn titles_and_parameter_descriptions_are_searched() {
    let mut titled = tool("s__t1", "s", "", &[]);
    titled.title = "Weather forecast";
    let mut annotated = tool("s__t2", "s", "", &[]);
    annotated.annotation_title = "Weather radar";
    let mut described = tool("s__t3", "s", "", &[]);
    described.params = vec![("q", "the city whose weather to give")];
    let tools = vec![titled, annotated, described];
    assert_eq!(names(&tools, "weather"), vec!["s__t1", "s__t2", "s__t3"]);
    assert_eq!(names(&tools, "radar"), vec!["s__t2"]);
    assert_eq!(names(&tools, "city"), vec!["s__t3"]);
}

#[test]
fn the_server_prefix_counts_as_the_server_not_the_name() {
    assert_eq!(bare_name("fs__read_file", "fs"), "read_file");
    assert_eq!(bare_name("read_file", "fs"), "read_file");
    assert_eq!(bare_name("fs", "fs"), "fs");
    assert_eq!(bare_name("fsx_read", "fs"), "fsx_read");
    assert_eq!(bare_name("fs.read", "fs"), "read");
}

#[test]
fn searchable_reads_a_tools_json() {
    let json: Value = serde_json::from_str(
        r#"{"name":"fs__read","title":"Read","description":"Reads","annotations":{"title":"Reader"},
            "inputSchema":{"type":"object","properties":{"path":{"type":"string","description":"Where"},"n":{}}}}"#,
    )
    .unwrap_or(Value::Null);
    let s = searchable("fs", &json);
    assert_eq!(
        (s.name, s.server, s.title, s.annotation_title, s.description),
        ("fs__read", "fs", "Read", "Reader", "Reads")
    );
    assert_eq!(s.params, vec![("n", ""), ("path", "Where")]);
    let empty = searchable("fs", &Value::Null);
    assert_eq!((empty.name, empty.params.len()), ("", 0));
}

#[test]
fn ln_is_accurate_enough_for_idf() {
    for (x, want) in [
        (1.0, 0.0),
        (2.0, core::f64::consts::LN_2),
        (10.0, core::f64::consts::LN_10),
        (0.5, -core::f64::consts::LN_2),
    ] {
        let got = ln(x);
        assert!((got - want) * (got - want) < 1e-18, "ln({x}) = {got}, not {want}");
    }
    assert!(idf(100, 1) > idf(100, 50) && idf(100, 100) > 0.0);
}

#[test]
fn words_split_unicode_text_at_its_own_separators() {
    assert_eq!(words("naïveCafé don’t 日本語ツール"), vec!["naïve", "café", "don", "t", "日本語ツール"]);
    assert_eq!(words("ÉCOLE école"), vec!["école", "école"]);
}

#[test]
fn hostile_text_is_searched_without_harm() {
    let long_y = "y".repeat(100_000);
    let mixed = "ÿ".repeat(1000) + &"ab".repeat(10_000);
    let tools = vec![tool("a__y", "a", &long_y, &[]), tool("b__m", "b", &mixed, &["", "🙂"])];
    assert_eq!(names(&tools, &long_y), vec!["a__y"]);
    assert!(rank(&tools, "ab ÿ 🙂", 10).len() <= 2);
    // A pasted page counts its first words only.
    let page = "word ".repeat(5000) + "a__y";
    assert!(query_stems(&page).len() <= MAX_QUERY_WORDS);
}

#[test]
fn one_line_keeps_the_first_sentence_and_shortens() {
    assert_eq!(one_line("Reads a file. Use with care.\nMore.", 80), "Reads a file.");
    assert_eq!(one_line("first line\nsecond", 80), "first line");
    assert_eq!(one_line("abcdefghij", 5), "abcd…");
    assert_eq!(one_line("", 5), "");
}
