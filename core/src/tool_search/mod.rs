//! Ranking tools by a free-text request, for meta mode's `search_tools`: a model
//! that sees six tools instead of hundreds finds the one it needs by asking as it
//! would ask a person ("remember a fact about Alice", "show me this folder").
//!
//! **Words.** Text is split at anything not a letter or digit and at lower-to-upper
//! case changes (`readFile` is `read file`), lower-cased, and reduced by [`stem`], a
//! small conservative suffix stripper (`entities` → `entity`, `listing` → `list`,
//! `created` and `creates` → `creat`), on both sides. The request's stop words are
//! left out (all of them kept when nothing else is left, so "get" still finds
//! `get_*` tools).
//!
//! **Equivalents.** Each request word also stands for its common equivalents
//! (`EQUIVALENTS`: `folder` for `directory`, `picture` for `image`, …) at
//! `EQUIVALENT_WEIGHT` of a direct match, and matches a longer word it starts
//! (`auth` finds `authentication`) at `PREFIX_WEIGHT`.
//!
//! **Score.** BM25F (k1 = 1.2, b = 0.75) over five fields of each tool: its
//! served name (without the server prefix), its title, its description, its
//! parameters' names and descriptions, and its server's name, weighted in that
//! order (`FIELD_WEIGHTS`). BM25F rather than a sum of per-field BM25 scores:
//! the weighted term counts of all fields are added *before* saturation and one
//! IDF is used per word, so a word found in both the name and the title (which
//! usually repeat each other) is not paid twice in full, and a word frequent in
//! one field is not mistaken for a rare one in another. Then each request word
//! is paid once, by its best form, and each word of the tool pays for one
//! request word only (so a tool naming three synonyms of one request word, or
//! one word equivalent to two, does not beat a tool answering two of them), and
//! the sum is scaled by the share of request words found (Lucene's classic
//! coordination factor): a tool answering most of a request ranks above one
//! matching a single rare word of it. Deterministic: the same tools and request
//! give the same order; equal scores are ordered by served name.
//!
//! The index is built per call, streaming over the tools' text with one reused
//! word buffer, so a search costs one pass over the catalog and no allocation per
//! word.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;
use serde_json::Value;

/// What a tool offers to be searched by.
#[derive(Clone, Debug, Default)]
pub struct Searchable<'a> {
    /// The served (namespaced) name.
    pub name: &'a str,
    /// The backend's name.
    pub server: &'a str,
    /// The tool's `title`: a human name, often clearer than the served one.
    pub title: &'a str,
    /// The tool's `annotations.title`, the older place for the same.
    pub annotation_title: &'a str,
    /// The tool's description.
    pub description: &'a str,
    /// Its input parameters, as (name, description): what a tool acts on.
    pub params: Vec<(&'a str, &'a str)>,
}

/// One ranked hit: the index of the tool in the slice searched, and its score.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// Index into the tools given to [`rank`].
    pub index: usize,
    /// Higher is better (the score × 1000, rounded); only positive scores are returned.
    pub score: u32,
}

/// BM25's term-frequency saturation.
const K1: f64 = 1.2;
/// BM25's length normalisation (0: none, 1: full), the same for every field.
const B: f64 = 0.75;
/// The fields searched: name, title, description, parameters, server.
const FIELDS: usize = 5;
/// How much a word counts in each field, in the order of [`FIELDS`]: what a tool
/// is called says most about it, its backend's name least.
const FIELD_WEIGHTS: [f64; FIELDS] = [3.0, 2.0, 1.0, 0.6, 0.3];
/// How much an equivalent from [`EQUIVALENTS`] counts against the word itself.
const EQUIVALENT_WEIGHT: f64 = 0.6;
/// How much a request word counts found as the start of a longer word.
const PREFIX_WEIGHT: f64 = 0.5;
/// The shortest (stemmed) request word matched as a prefix: shorter ones start
/// too many unrelated words (`log` in `logo`, `add` in `address`).
const MIN_PREFIX: usize = 4;

/// The longest word stemmed: longer ones are not English words with suffixes
/// (identifiers, encoded data), and stemming stays cheap on hostile text.
const MAX_STEMMED: usize = 32;

/// The most request words searched for: a request is a sentence or a few
/// keywords, and a pasted page must not make a search slow.
const MAX_QUERY_WORDS: usize = 32;

/// Words too common in requests to tell tools apart.
const STOP_WORDS: &[&str] = &[
    "a", "about", "all", "an", "and", "any", "are", "as", "at", "be", "by", "can", "could", "do", "does", "for",
    "from", "get", "have", "how", "i", "if", "in", "into", "is", "it", "its", "let", "me", "my", "need", "not", "of",
    "on", "or", "please", "s", "so", "some", "t", "that", "the", "their", "them", "there", "they", "this", "to",
    "tool", "tools", "use", "want", "was", "we", "what", "when", "where", "which", "who", "will", "with", "would",
    "you", "your",
];

/// Common equivalents, one group a line: a request word of a group also finds
/// the others (after [`stem`], so plural and verb forms are covered). General
/// English and MCP vocabulary only, never a tool's name: the table must serve any
/// catalog. A word may sit in several groups.
const EQUIVALENTS: &[&[&str]] = &[
    &["picture", "image", "photo", "media", "png", "jpeg", "jpg", "screenshot"],
    &["folder", "directory", "dir"],
    &["file", "document"],
    &["remember", "memory", "memorize", "recall", "store", "save", "observation", "note"],
    &["forget", "delete", "remove", "erase", "drop"],
    &["find", "search", "lookup", "query", "locate"],
    &["show", "list", "display", "view", "get", "see", "look"],
    &["read", "open", "view", "load", "contents"],
    &["write", "create", "save", "make"],
    &["edit", "modify", "change", "update", "alter"],
    &["move", "rename", "relocate"],
    &["time", "clock", "date", "timezone"],
    &["convert", "translate", "transform"],
    &["person", "people", "entity", "someone", "individual"],
    &["fact", "observation", "knowledge", "information", "detail"],
    &["relation", "relationship", "link", "connection", "connect"],
    &["know", "knowledge", "graph"],
    &["sum", "add", "calculate", "total", "plus"],
    &["print", "echo", "repeat"],
    &["wait", "sleep", "delay", "pause"],
    &["run", "execute", "start", "trigger", "launch"],
    &["toggle", "switch", "enable", "disable"],
    &["size", "big", "large"],
    &["small", "tiny", "little"],
    &["fake", "simulate", "mock", "dummy"],
    &["compress", "zip", "gzip", "archive"],
    &["notify", "notification", "subscribe", "watch"],
    &["environment", "env"],
    &["configuration", "config", "settings"],
    &["information", "info", "metadata", "details"],
    // MCP's own terms: elicitation asks the user, sampling asks the client's model.
    &["ask", "question", "elicit"],
    &["sampling", "llm", "model", "completion"],
];

/// Splits text into lower-case words at non-alphanumerics and camelCase humps.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_span(text, |span| {
        let mut w = String::new();
        lower_into(span, &mut w);
        out.push(w);
    });
    out
}

/// Calls `f` with each word of `text` as it is written: runs of letters and
/// digits, split before an upper-case letter that follows a lower-case one or a
/// digit (`readFile`, `v2Beta`). Slices, not copies: most words of a catalog
/// match nothing searched for and are only counted. Runs of lower-case ASCII,
/// most of any text, are skipped over in a tight loop; other ASCII is
/// classified by table, the rest by `char`'s Unicode properties.
fn for_each_span(text: &str, mut f: impl FnMut(&str)) {
    let bytes = text.as_bytes();
    let mut start: Option<usize> = None;
    let mut prev_lower = false;
    let mut i = 0;
    while i < bytes.len() {
        let (class, len) = match BYTE_CLASS[usize::from(bytes[i])] {
            NOT_ASCII => {
                text.get(i..).and_then(|rest| rest.chars().next()).map_or((SEPARATOR, 1), |c| (class(c), c.len_utf8()))
            }
            ascii => (ascii, 1),
        };
        if class == SEPARATOR || (class == UPPER && prev_lower) {
            if let Some(word) = start.take().and_then(|s| text.get(s..i)) {
                f(word);
            }
        }
        if class != SEPARATOR {
            start.get_or_insert(i);
        }
        prev_lower = class == LOWER;
        i += len;
        while prev_lower && i < bytes.len() && BYTE_CLASS[usize::from(bytes[i])] == LOWER {
            i += 1;
        }
    }
    if let Some(word) = start.and_then(|s| text.get(s..)) {
        f(word);
    }
}

/// Character classes for splitting words: not part of a word; lower-case
/// letter or digit; upper-case letter; any other letter or digit; and, for a
/// byte, the start or rest of a character that is not ASCII.
const SEPARATOR: u8 = 0;
const LOWER: u8 = 1;
const UPPER: u8 = 2;
const CASELESS: u8 = 3;
const NOT_ASCII: u8 = 4;

/// The class of each byte.
const BYTE_CLASS: [u8; 256] = {
    let mut table = [NOT_ASCII; 256];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        table[b] = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            LOWER
        } else if c.is_ascii_uppercase() {
            UPPER
        } else {
            SEPARATOR
        };
        b += 1;
    }
    table
};

/// The class of any character.
fn class(c: char) -> u8 {
    if !c.is_alphanumeric() {
        SEPARATOR
    } else if c.is_uppercase() {
        UPPER
    } else if c.is_lowercase() || c.is_ascii_digit() {
        LOWER
    } else {
        CASELESS
    }
}

/// `word` in lower case, into `buf` (reused: no allocation once it is long enough).
fn lower_into(word: &str, buf: &mut String) {
    buf.clear();
    for c in word.chars() {
        if c.is_ascii() {
            buf.push(c.to_ascii_lowercase());
        } else {
            buf.extend(c.to_lowercase());
        }
    }
}

pub use stem::stem;

/// A word's stem, as an owned string.
fn stemmed(word: &str) -> String {
    let mut s = String::from(word);
    stem(&mut s);
    s
}

/// The stems of a request's words, stop words and repeats left out (all of
/// them kept when nothing else is left), the first [`MAX_QUERY_WORDS`] only.
fn query_stems(query: &str) -> Vec<String> {
    let all = words(query);
    let content: Vec<&String> = all.iter().filter(|w| !STOP_WORDS.contains(&w.as_str())).collect();
    let chosen: Vec<&String> = if content.is_empty() { all.iter().collect() } else { content };
    let mut out: Vec<String> = Vec::new();
    for w in chosen {
        let s = stemmed(w);
        if out.len() == MAX_QUERY_WORDS {
            break;
        }
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// The stems equivalent to `stem` by [`EQUIVALENTS`], itself left out.
fn equivalents(stem: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for group in EQUIVALENTS {
        let stems: Vec<String> = group.iter().map(|w| stemmed(w)).collect();
        if stems.iter().any(|s| s == stem) {
            for s in stems {
                if s != stem && !out.contains(&s) {
                    out.push(s);
                }
            }
        }
    }
    out
}

/// One form a request word is searched in.
#[derive(Clone, Copy, Debug)]
struct Variant {
    /// Which request word it stands for.
    word: usize,
    /// Index into [`Query::keys`].
    key: usize,
    /// 1 for the word itself, [`EQUIVALENT_WEIGHT`] for an equivalent.
    weight: f64,
}

/// A request, expanded: every stem searched for, and what each stands for.
#[derive(Debug, Default)]
struct Query {
    /// The distinct stems searched for, sorted.
    keys: Vec<String>,
    /// Each request word's forms, with their weights.
    variants: Vec<Variant>,
    /// How many request words there are.
    words: usize,
    /// A bit per [`head`] of the keys: a word whose head is not here matches
    /// none, and is neither stemmed nor looked up.
    heads: Vec<u64>,
    /// Per 64 bits of `heads`, how many bits are set before them: with a
    /// `count_ones` within, a head's rank among the keys' heads.
    heads_before: Vec<u32>,
    /// Per head of the keys, in order, the keys with it (sorted keys sort by
    /// head, so they are next to each other).
    head_keys: Vec<Range<usize>>,
}

/// The first two bytes of a word as a number (one byte and zero for a word of
/// one). Stemming keeps them (it cuts a few letters off the end of words longer
/// than three), so a word's head is its stem's.
fn head(word: &[u8]) -> usize {
    match word {
        [] => 0,
        [a] => usize::from(*a) << 8,
        [a, b, ..] => usize::from(*a) << 8 | usize::from(*b),
    }
}

impl Query {
    fn new(text: &str) -> Query {
        let stems = query_stems(text);
        let mut forms: Vec<(usize, String, f64)> = Vec::new();
        for (word, s) in stems.iter().enumerate() {
            for e in equivalents(s) {
                forms.push((word, e, EQUIVALENT_WEIGHT));
            }
            forms.push((word, s.clone(), 1.0));
        }
        let mut keys: Vec<String> = forms.iter().map(|(_, s, _)| s.clone()).collect();
        keys.sort();
        keys.dedup();
        let mut variants: Vec<Variant> = Vec::new();
        for (word, s, weight) in forms {
            let key = keys.binary_search(&s).unwrap_or_default();
            match variants.iter_mut().find(|v| v.word == word && v.key == key) {
                Some(v) => v.weight = v.weight.max(weight),
                None => variants.push(Variant { word, key, weight }),
            }
        }
        let mut heads = vec![0u64; (1 << 16) / 64];
        let mut head_keys: Vec<Range<usize>> = Vec::new();
        for (key, k) in keys.iter().enumerate() {
            let h = head(k.as_bytes());
            if heads[h / 64] & (1 << (h % 64)) == 0 {
                heads[h / 64] |= 1 << (h % 64);
                head_keys.push(key..key);
            }
            if let Some(range) = head_keys.last_mut() {
                range.end = key + 1;
            }
        }
        let heads_before = heads
            .iter()
            .scan(0u32, |before, bits| {
                let this = *before;
                *before += bits.count_ones();
                Some(this)
            })
            .collect();
        Query { keys, variants, words: stems.len(), heads, heads_before, head_keys }
    }

    /// The keys whose [`head`] is `h`.
    fn keys_with_head(&self, h: usize) -> Range<usize> {
        let (block, bit) = (h / 64, 1u64 << (h % 64));
        if self.heads[block] & bit == 0 {
            return 0..0;
        }
        let rank = self.heads_before[block] + (self.heads[block] & (bit - 1)).count_ones();
        self.head_keys.get(rank as usize).cloned().unwrap_or(0..0)
    }

    /// Whether `word`, as written, can match a key at all (a word starting with
    /// anything but ASCII is looked up to be sure).
    fn may_match(&self, word: &str) -> bool {
        let lower = match *word.as_bytes() {
            [a] if a.is_ascii() => [a.to_ascii_lowercase(), 0],
            [a, b, ..] if a.is_ascii() && b.is_ascii() => [a.to_ascii_lowercase(), b.to_ascii_lowercase()],
            _ => return true,
        };
        let h = head(if lower[1] == 0 { &lower[..1] } else { &lower });
        self.heads[h / 64] & (1 << (h % 64)) != 0
    }

    /// Calls `f(key, weight)` for each key `word` matches: itself (1), or a
    /// key of at least [`MIN_PREFIX`] bytes it starts with ([`PREFIX_WEIGHT`]).
    /// Only keys with the word's [`head`] can, seldom more than a few.
    fn matches(&self, word: &str, mut f: impl FnMut(usize, f64)) {
        let w = word.as_bytes();
        for key in self.keys_with_head(head(w)) {
            let k = self.keys[key].as_bytes();
            if k.len() == w.len() && starts(w, k) {
                f(key, 1.0);
            } else if k.len() >= MIN_PREFIX && k.len() < w.len() && starts(w, k) {
                f(key, PREFIX_WEIGHT);
            }
        }
    }
}

/// Whether `word` starts with `prefix`, compared byte by byte (both are short).
fn starts(word: &[u8], prefix: &[u8]) -> bool {
    word.len() >= prefix.len() && word.iter().zip(prefix).all(|(a, b)| a == b)
}

/// The name without its server prefix (`fs__read_file` → `read_file`), so the
/// server's words count only as the server field. A name not prefixed, or
/// prefixed with a separator of letters or digits, is kept whole.
fn bare_name<'a>(name: &'a str, server: &str) -> &'a str {
    let Some(rest) = name.strip_prefix(server).filter(|r| r.starts_with(|c: char| !c.is_alphanumeric())) else {
        return name;
    };
    match rest.trim_start_matches(|c: char| !c.is_alphanumeric()) {
        "" => name,
        bare => bare,
    }
}

/// The text of each field of a tool, as (field, text), in [`FIELDS`] order.
fn field_texts<'a>(tool: &Searchable<'a>, mut f: impl FnMut(usize, &'a str)) {
    f(0, bare_name(tool.name, tool.server));
    f(1, tool.title);
    if !tool.annotation_title.eq_ignore_ascii_case(tool.title) {
        f(1, tool.annotation_title);
    }
    f(2, tool.description);
    for (name, description) in &tool.params {
        f(3, name);
        f(3, description);
    }
    f(4, tool.server);
}

/// One word of a tool found for a key: in which field, and how well.
#[derive(Clone, Copy, Debug)]
struct Found {
    key: u32,
    field: u8,
    weight: f32,
}

/// What the first pass learns of one tool: its field lengths in words, and
/// where its matches are in the shared list.
#[derive(Clone, Copy, Debug, Default)]
struct Scanned {
    lengths: [u32; FIELDS],
    found: (usize, usize),
}

/// First pass: each tool's field lengths and every word matching a key.
fn scan(tools: &[Searchable<'_>], query: &Query) -> (Vec<Scanned>, Vec<Found>) {
    let mut buf = String::new();
    let mut found: Vec<Found> = Vec::new();
    let mut scanned: Vec<Scanned> = Vec::with_capacity(tools.len());
    for tool in tools {
        let start = found.len();
        let mut lengths = [0u32; FIELDS];
        field_texts(tool, |field, text| {
            for_each_span(text, |span| {
                lengths[field] += 1;
                if !query.may_match(span) {
                    return;
                }
                lower_into(span, &mut buf);
                stem(&mut buf);
                query.matches(&buf, |key, weight| {
                    found.push(Found { key: key as u32, field: field as u8, weight: weight as f32 });
                });
            });
        });
        scanned.push(Scanned { lengths, found: (start, found.len()) });
    }
    (scanned, found)
}

/// Natural logarithm of `x` > 0 (no `std` here): `x = m·2^e` with `m` in [1, 2),
/// `ln m` from its atanh series, which converges fast there.
fn ln(x: f64) -> f64 {
    let bits = x.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let (mut term, mut sum) = (s, 0.0);
    for k in 0..12 {
        sum += term / f64::from(2 * k + 1);
        term *= s2;
    }
    exponent as f64 * core::f64::consts::LN_2 + 2.0 * sum
}

/// BM25's inverse document frequency: rare words tell tools apart.
fn idf(tools: usize, with_word: usize) -> f64 {
    let (n, d) = (tools as f64, with_word as f64);
    ln(1.0 + (n - d + 0.5) / (d + 0.5))
}

/// How many tools have a match for each key.
fn document_frequencies(scanned: &[Scanned], found: &[Found], keys: usize) -> Vec<usize> {
    let mut df = vec![0usize; keys];
    let mut last_tool = vec![usize::MAX; keys];
    for (tool, s) in scanned.iter().enumerate() {
        for f in &found[s.found.0..s.found.1] {
            let key = f.key as usize;
            if last_tool[key] != tool {
                last_tool[key] = tool;
                df[key] += 1;
            }
        }
    }
    df
}

/// Second pass: each tool's score. The vectors are scratch space reused from
/// tool to tool (zero, false or empty between calls of [`Scorer::score`]).
struct Scorer<'q> {
    query: &'q Query,
    idf: Vec<f64>,
    average: [f64; FIELDS],
    /// Per key: its BM25F weighted, length-normalised count in this tool.
    tf: Vec<f64>,
    /// (score, request word, key) of every form found in this tool.
    candidates: Vec<(f64, usize, usize)>,
    word_done: Vec<bool>,
    key_done: Vec<bool>,
}

impl<'q> Scorer<'q> {
    fn new(query: &'q Query, scanned: &[Scanned], found: &[Found]) -> Scorer<'q> {
        let n = scanned.len();
        let df = document_frequencies(scanned, found, query.keys.len());
        let mut average = [0.0; FIELDS];
        for s in scanned {
            for (a, l) in average.iter_mut().zip(s.lengths) {
                *a += f64::from(l);
            }
        }
        for a in &mut average {
            *a /= n.max(1) as f64;
        }
        Scorer {
            query,
            idf: df.iter().map(|&d| idf(n, d)).collect(),
            average,
            tf: vec![0.0; query.keys.len()],
            candidates: Vec::new(),
            word_done: vec![false; query.words],
            key_done: vec![false; query.keys.len()],
        }
    }

    /// BM25F: per key, the field-weighted, length-normalised count, saturated
    /// once. Each request word is then paid by its best form, a tool's word
    /// paying for one request word only (best pairs first), and the sum is
    /// scaled by the share of request words found.
    fn score(&mut self, scanned: &Scanned, found: &[Found]) -> f64 {
        let matches = &found[scanned.found.0..scanned.found.1];
        for f in matches {
            let field = usize::from(f.field);
            let length = f64::from(scanned.lengths[field]);
            let average = self.average[field];
            let norm = if average > 0.0 { 1.0 - B + B * length / average } else { 1.0 };
            self.tf[f.key as usize] += FIELD_WEIGHTS[field] * f64::from(f.weight) / norm;
        }
        for v in &self.query.variants {
            let tf = self.tf[v.key];
            if tf > 0.0 {
                self.candidates.push((v.weight * self.idf[v.key] * tf / (K1 + tf), v.word, v.key));
            }
        }
        self.candidates.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let (mut total, mut found_words) = (0.0, 0);
        for &(s, word, key) in &self.candidates {
            if !self.word_done[word] && !self.key_done[key] {
                self.word_done[word] = true;
                self.key_done[key] = true;
                total += s;
                found_words += 1;
            }
        }
        for &(_, word, key) in &self.candidates {
            self.word_done[word] = false;
            self.key_done[key] = false;
        }
        for f in matches {
            self.tf[f.key as usize] = 0.0;
        }
        self.candidates.clear();
        total * f64::from(found_words) / self.query.words.max(1) as f64
    }
}

/// Ranks `tools` for `query`, best first, at most `limit`. An empty query
/// returns every tool by name; tools matching nothing are left out.
pub fn rank(tools: &[Searchable<'_>], query: &str, limit: usize) -> Vec<Hit> {
    let query = Query::new(query);
    let mut hits: Vec<Hit> = if query.words == 0 {
        (0..tools.len()).map(|index| Hit { index, score: 1 }).collect()
    } else {
        let (scanned, found) = scan(tools, &query);
        let mut scorer = Scorer::new(&query, &scanned, &found);
        let mut hits = Vec::new();
        for (index, s) in scanned.iter().enumerate() {
            let score = scorer.score(s, &found);
            if score > 0.0 {
                hits.push(Hit { index, score: ((score * 1000.0 + 0.5) as u32).max(1) });
            }
        }
        hits
    };
    hits.sort_by(|a, b| b.score.cmp(&a.score).then_with(|| tools[a.index].name.cmp(tools[b.index].name)));
    hits.truncate(limit);
    hits
}

/// What a listed tool's JSON (with its served name) offers to search: the one
/// place that reads it, shared by `search_tools` and the recall test.
pub fn searchable<'a>(server: &'a str, tool: &'a Value) -> Searchable<'a> {
    let text = |v: Option<&'a Value>| v.and_then(Value::as_str).unwrap_or("");
    let params = tool
        .pointer("/inputSchema/properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(name, schema)| (name.as_str(), text(schema.get("description")))).collect())
        .unwrap_or_default();
    Searchable {
        name: text(tool.get("name")),
        server,
        title: text(tool.get("title")),
        annotation_title: text(tool.pointer("/annotations/title")),
        description: text(tool.get("description")),
        params,
    }
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

mod stem;
#[cfg(test)]
mod tests;
