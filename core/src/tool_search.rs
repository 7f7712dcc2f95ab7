//! Ranking tools by a free-text query, for meta mode's `search_tools`: a model
//! that sees six tools instead of hundreds finds the one it needs by keywords.
//!
//! Tokenised keyword scoring, deterministic (ties break by served name): a query
//! word scores most where it names the tool, less in its description, least in
//! its parameter names or its backend's name. Words are split at anything not a
//! letter or digit and at lower-to-upper case changes (`readFile` is `read file`),
//! compared in lower case, and a query word also matches a longer word it starts
//! (`list` finds `listing`), for less.

use alloc::string::String;
use alloc::vec::Vec;

/// What a tool offers to be searched by.
#[derive(Clone, Debug, Default)]
pub struct Searchable<'a> {
    /// The served (namespaced) name.
    pub name: &'a str,
    /// The backend's name.
    pub server: &'a str,
    /// The tool's description.
    pub description: &'a str,
    /// Names of its input parameters.
    pub params: Vec<&'a str>,
}

/// One ranked hit: the index of the tool in the slice searched, and its score.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// Index into the tools given to [`rank`].
    pub index: usize,
    /// Higher is better; only positive scores are returned.
    pub score: u32,
}

/// Words too common to tell tools apart.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "do", "for", "from", "get", "i", "in", "is", "it",
    "me", "my", "of", "on", "or", "that", "the", "this", "to", "tool", "tools", "use", "with",
];

/// Splits text into lower-case words at non-alphanumerics and camelCase humps.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut prev_lower = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            if c.is_uppercase() && prev_lower && !word.is_empty() {
                out.push(core::mem::take(&mut word));
            }
            prev_lower = c.is_lowercase() || c.is_ascii_digit();
            word.extend(c.to_lowercase());
        } else {
            prev_lower = false;
            if !word.is_empty() {
                out.push(core::mem::take(&mut word));
            }
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// The query's words, stop words and repeats left out (all of them kept when
/// nothing else is left, so "get" still finds `get_*` tools).
fn query_words(query: &str) -> Vec<String> {
    let all = words(query);
    let mut kept: Vec<String> = Vec::new();
    for w in all.iter().filter(|w| !STOP_WORDS.contains(&w.as_str())) {
        if !kept.contains(w) {
            kept.push(w.clone());
        }
    }
    if kept.is_empty() {
        for w in all {
            if !kept.contains(&w) {
                kept.push(w);
            }
        }
    }
    kept
}

/// How well `word` matches a field's words: exact, or as the start of one.
fn field_match(word: &str, field: &[String], exact: u32, prefix: u32) -> u32 {
    if field.iter().any(|f| f == word) {
        exact
    } else if word.len() >= 3 && field.iter().any(|f| f.starts_with(word)) {
        prefix
    } else {
        0
    }
}

/// Ranks `tools` for `query`, best first, at most `limit`. An empty query (or
/// one of stop words only that matches nothing) returns every tool by name.
pub fn rank(tools: &[Searchable<'_>], query: &str, limit: usize) -> Vec<Hit> {
    let wanted = query_words(query);
    let mut hits: Vec<Hit> = Vec::new();
    for (index, tool) in tools.iter().enumerate() {
        if wanted.is_empty() {
            hits.push(Hit { index, score: 1 });
            continue;
        }
        let name = words(tool.name);
        let description = words(tool.description);
        let params: Vec<String> = tool.params.iter().flat_map(|p| words(p)).collect();
        let server = words(tool.server);
        let mut score: u32 = 0;
        let mut matched: u32 = 0;
        for w in &wanted {
            let s = field_match(w, &name, 12, 7)
                + field_match(w, &description, 4, 2)
                + field_match(w, &params, 2, 1)
                + field_match(w, &server, 3, 1);
            if s > 0 {
                matched += 1;
            }
            score += s;
        }
        if score == 0 {
            continue;
        }
        // Every word of the query found: a much better answer than some of them.
        if matched as usize == wanted.len() && wanted.len() > 1 {
            score += 10 * matched;
        }
        // The whole query inside the name (`read_file` for "read file").
        let joined = wanted.join("_");
        if wanted.len() > 1 && tool.name.to_lowercase().contains(&joined) {
            score += 8;
        }
        hits.push(Hit { index, score });
    }
    hits.sort_by(|a, b| b.score.cmp(&a.score).then_with(|| tools[a.index].name.cmp(tools[b.index].name)));
    hits.truncate(limit);
    hits
}

/// The first sentence or line of a description, at most `max` characters: what
/// a search result needs to tell tools apart.
pub fn one_line(description: &str, max: usize) -> String {
    let line = description.trim().lines().next().unwrap_or("").trim();
    let sentence = match line.find(". ") {
        Some(end) => &line[..=end],
        None => line,
    };
    if sentence.chars().count() <= max {
        return String::from(sentence);
    }
    let mut out: String = sentence.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn tool<'a>(name: &'a str, server: &'a str, description: &'a str, params: &[&'a str]) -> Searchable<'a> {
        Searchable { name, server, description, params: params.to_vec() }
    }

    fn names(tools: &[Searchable<'_>], query: &str) -> Vec<String> {
        rank(tools, query, 10).iter().map(|h| String::from(tools[h.index].name)).collect()
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
        // Nothing but stop words: they are searched for after all.
        assert_eq!(names(&tools, "the"), vec!["everything__echo", "fs__read_file", "memory__read_graph"]);
        // Empty: everything, by name.
        assert_eq!(names(&tools, "")[0], "everything__echo");
        assert_eq!(rank(&tools, "", 2).len(), 2);
    }

    #[test]
    fn a_query_word_matches_the_start_of_longer_words_for_less() {
        let tools = vec![
            tool("a__listing", "a", "", &[]),
            tool("b__list", "b", "", &[]),
            tool("c__other", "c", "makes lists", &[]),
        ];
        assert_eq!(names(&tools, "list"), vec!["b__list", "a__listing", "c__other"]);
    }

    #[test]
    fn one_line_keeps_the_first_sentence_and_shortens() {
        assert_eq!(one_line("Reads a file. Use with care.\nMore.", 80), "Reads a file.");
        assert_eq!(one_line("first line\nsecond", 80), "first line");
        assert_eq!(one_line("abcdefghij", 5), "abcd…");
        assert_eq!(one_line("", 5), "");
    }
}
