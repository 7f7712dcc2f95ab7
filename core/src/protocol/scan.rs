//! A strict JSON scanner for the hot path: one pass over a frame, no
//! allocation, no tree. It accepts only what `serde_json` accepts (the same
//! grammar, escapes and whitespace) and gives up (`None`) on anything else, so
//! callers fall back to `serde_json`, which then says exactly what is wrong.
//!
//! [`Scan`] walks a frame member by member; the free functions below it each
//! find where one piece of JSON that starts at a position ends.

/// A position in a JSON text being scanned.
pub(crate) struct Scan<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Scan<'a> {
    /// A scan at the start of `text`.
    pub(crate) fn new(text: &'a str) -> Self {
        Scan { text, pos: 0 }
    }

    /// The text as bytes (every position the scan stops at is a character boundary).
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte that is not whitespace, not consumed.
    pub(crate) fn next_token(&mut self) -> Option<u8> {
        self.pos = skip_ws(self.bytes(), self.pos);
        self.bytes().get(self.pos).copied()
    }

    /// Consumes `byte`, after whitespace.
    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next_token()? == byte).then(|| self.pos += 1)
    }

    /// Whether nothing but whitespace is left.
    pub(crate) fn at_end(&mut self) -> bool {
        self.next_token().is_none()
    }

    /// A string value without escapes, its content borrowed; `None` for
    /// anything else (another type, or escapes to decode).
    pub(crate) fn plain_string(&mut self) -> Option<&'a str> {
        if self.next_token()? != b'"' {
            return None;
        }
        let (end, escaped) = string_end(self.bytes(), self.pos)?;
        let content = self.text.get(self.pos + 1..end - 1)?;
        self.pos = end;
        (!escaped).then_some(content)
    }

    /// One value, checked whole; returns its text, without surrounding whitespace.
    pub(crate) fn value(&mut self) -> Option<&'a str> {
        let start = skip_ws(self.bytes(), self.pos);
        let end = value_end(self.bytes(), start)?;
        self.pos = end;
        self.text.get(start..end)
    }

    /// Consumes a member's key and its colon; returns the key as written and
    /// whether it has escapes.
    pub(crate) fn key(&mut self) -> Option<(&'a str, bool)> {
        if self.next_token()? != b'"' {
            return None;
        }
        let (end, escaped) = string_end(self.bytes(), self.pos)?;
        let key = self.text.get(self.pos + 1..end - 1)?;
        self.pos = end;
        self.expect(b':')?;
        Some((key, escaped))
    }

    /// The first character of the member key that comes next, not consumed:
    /// callers pick from it the key it most likely is, for [`Scan::known_key`].
    pub(crate) fn key_initial(&mut self) -> Option<u8> {
        if self.next_token()? != b'"' {
            return None;
        }
        self.bytes().get(self.pos + 1).copied()
    }

    /// Consumes `quoted` (a JSON string written plainly, quotes included) when
    /// the text continues with it after whitespace: a known key or value read
    /// without scanning it. Nothing is consumed otherwise.
    pub(crate) fn known<const N: usize>(&mut self, quoted: &[u8; N]) -> bool {
        self.pos = skip_ws(self.bytes(), self.pos);
        let found = self.bytes().get(self.pos..).and_then(<[u8]>::first_chunk::<N>) == Some(quoted);
        if found {
            self.pos += N;
        }
        found
    }

    /// Consumes a member key written plainly as `quoted` and its colon; nothing
    /// when the key is another (or no colon follows: [`Scan::key`] then says so).
    pub(crate) fn known_key<const N: usize>(&mut self, quoted: &[u8; N]) -> bool {
        let start = self.pos;
        if self.known(quoted) && self.expect(b':').is_some() {
            return true;
        }
        self.pos = start;
        false
    }

    /// Scans an object at the position member by member: `member` reads each
    /// member, key ([`Scan::key`]) and value. Returns the object's text.
    pub(crate) fn object(&mut self, mut member: impl FnMut(&mut Self) -> Option<()>) -> Option<&'a str> {
        self.pos = skip_ws(self.bytes(), self.pos);
        let start = self.pos;
        self.expect(b'{')?;
        if self.next_token()? == b'}' {
            self.pos += 1;
            return self.text.get(start..self.pos);
        }
        loop {
            member(self)?;
            match self.next_token()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return self.text.get(start..self.pos);
                }
                _ => return None,
            }
        }
    }
}

/// How deep [`nested_end`] follows nested arrays and objects before it gives up.
const MAX_DEPTH: usize = 256;

/// The kinds of the containers a value is inside, one bit each (object = 1):
/// nesting without recursion and without a heap stack.
struct Nesting {
    bits: [u64; MAX_DEPTH / 64],
    depth: usize,
}

impl Nesting {
    /// At the top level.
    fn new() -> Self {
        Nesting { bits: [0; MAX_DEPTH / 64], depth: 0 }
    }

    /// Enters a container; `None` past [`MAX_DEPTH`].
    fn push(&mut self, object: bool) -> Option<()> {
        if self.depth == MAX_DEPTH {
            return None;
        }
        let (word, bit) = (self.depth / 64, self.depth % 64);
        self.bits[word] = (self.bits[word] & !(1 << bit)) | (u64::from(object) << bit);
        self.depth += 1;
        Some(())
    }

    /// Leaves the innermost container.
    fn pop(&mut self) {
        self.depth -= 1;
    }

    /// Whether the innermost container is an object; `None` at the top level.
    fn top(&self) -> Option<bool> {
        let at = self.depth.checked_sub(1)?;
        Some((self.bits[at / 64] >> (at % 64)) & 1 == 1)
    }
}

/// Whether `byte` is JSON whitespace.
fn is_ws(byte: u8) -> bool {
    matches!(byte, b' ' | b'\n' | b'\t' | b'\r')
}

/// The first position from `at` that is not whitespace.
#[inline]
fn skip_ws(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).copied().is_some_and(is_ws) {
        at += 1;
    }
    at
}

/// Where the value that starts at `at` ends.
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'{' | b'[' => nested_end(bytes, at),
        _ => scalar_end(bytes, at),
    }
}

/// Where the string, literal or number that starts at `at` ends.
#[inline]
fn scalar_end(bytes: &[u8], at: usize) -> Option<usize> {
    match *bytes.get(at)? {
        b'"' => string_end(bytes, at).map(|(end, _)| end),
        b't' => literal_end(bytes, at, b"true"),
        b'f' => literal_end(bytes, at, b"false"),
        b'n' => literal_end(bytes, at, b"null"),
        b'-' | b'0'..=b'9' => number_end(bytes, at),
        _ => None,
    }
}

/// Where the array or object that starts at `at` ends, nested containers
/// followed without recursion.
fn nested_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    let mut nesting = Nesting::new();
    loop {
        // A value starts at `at`.
        match *bytes.get(at)? {
            open @ (b'{' | b'[') => {
                let object = open == b'{';
                at = skip_ws(bytes, at + 1);
                if bytes.get(at) == Some(if object { &b'}' } else { &b']' }) {
                    at += 1;
                } else {
                    nesting.push(object)?;
                    if object {
                        at = key_end(bytes, at)?;
                    }
                    continue;
                }
            }
            _ => at = scalar_end(bytes, at)?,
        }
        // After a value: close containers until one has a next element.
        loop {
            let Some(object) = nesting.top() else { return Some(at) };
            at = skip_ws(bytes, at);
            match *bytes.get(at)? {
                b',' => {
                    at = skip_ws(bytes, at + 1);
                    if object {
                        at = key_end(bytes, at)?;
                    }
                    break;
                }
                b'}' if object => at += 1,
                b']' if !object => at += 1,
                _ => return None,
            }
            nesting.pop();
        }
    }
}

/// Where the member key that starts at `at` and its colon end, with the
/// whitespace after the colon.
fn key_end(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let (end, _) = string_end(bytes, at)?;
    let colon = skip_ws(bytes, end);
    (bytes.get(colon) == Some(&b':')).then(|| skip_ws(bytes, colon + 1))
}

/// Where the string whose opening quote is at `at` ends (past its closing
/// quote), and whether it has escapes.
#[inline]
fn string_end(bytes: &[u8], at: usize) -> Option<(usize, bool)> {
    let mut at = at + 1;
    let mut escaped = false;
    loop {
        let (end, stop) = plain_run_end(bytes, at)?;
        match stop {
            b'"' => return Some((end + 1, escaped)),
            b'\\' => {
                escaped = true;
                at = escape_end(bytes, end + 1)?;
            }
            // A control character: not allowed in a string.
            _ => return None,
        }
    }
}

/// Where the escape whose backslash is just before `at` ends, checked as
/// `serde_json` checks one it skips.
fn escape_end(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(at + 1),
        b'u' => {
            let hex = bytes.get(at + 1..at + 5)?;
            hex.iter().all(u8::is_ascii_hexdigit).then_some(at + 5)
        }
        _ => None,
    }
}

/// Where the decimal digits from `at` end.
fn digits_end(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(u8::is_ascii_digit) {
        at += 1;
    }
    at
}

/// Where the number that starts at `at` ends: `-`, an integer part without
/// leading zeros, a fraction, an exponent.
fn number_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    if bytes.get(at) == Some(&b'-') {
        at += 1;
    }
    at = match bytes.get(at)? {
        b'0' if bytes.get(at + 1).is_some_and(u8::is_ascii_digit) => return None,
        b'0' => at + 1,
        b'1'..=b'9' => digits_end(bytes, at + 1),
        _ => return None,
    };
    if bytes.get(at) == Some(&b'.') {
        let end = digits_end(bytes, at + 1);
        if end == at + 1 {
            return None;
        }
        at = end;
    }
    if matches!(bytes.get(at), Some(b'e' | b'E')) {
        at += 1;
        if matches!(bytes.get(at), Some(b'+' | b'-')) {
            at += 1;
        }
        let end = digits_end(bytes, at);
        if end == at {
            return None;
        }
        at = end;
    }
    Some(at)
}

/// Where `word` (`true`, `false`, `null`) at `at` ends.
fn literal_end(bytes: &[u8], at: usize, word: &[u8]) -> Option<usize> {
    let end = at + word.len();
    (bytes.get(at..end)? == word).then_some(end)
}

/// Where the run of plain string bytes from `at` ends, and the byte there: the
/// first quote, backslash or control character (`None`: the text ends first).
/// Eight bytes first (most strings are short), then sixteen at a time.
#[inline]
fn plain_run_end(bytes: &[u8], at: usize) -> Option<(usize, u8)> {
    let rest = bytes.get(at..)?;
    let Some((first, rest)) = rest.split_first_chunk::<8>() else { return byte_run_end(rest, at) };
    let first = u64::from_le_bytes(*first);
    if stops(first) != 0 {
        return Some(first_stop(at, first, stops(first)));
    }
    let at = at + 8;
    let mut pairs = rest.chunks_exact(16);
    for (i, pair) in pairs.by_ref().enumerate() {
        let (low, high) = (word(&pair[..8]), word(&pair[8..]));
        let (low_stops, high_stops) = (stops(low), stops(high));
        if low_stops | high_stops != 0 {
            let at = at + i * 16;
            return Some(if low_stops != 0 {
                first_stop(at, low, low_stops)
            } else {
                first_stop(at + 8, high, high_stops)
            });
        }
    }
    let tail = pairs.remainder();
    let tail_at = at + (rest.len() - tail.len());
    match tail.split_first_chunk::<8>() {
        Some((chunk, after)) => {
            let chunk = u64::from_le_bytes(*chunk);
            if stops(chunk) != 0 {
                return Some(first_stop(tail_at, chunk, stops(chunk)));
            }
            byte_run_end(after, tail_at + 8)
        }
        None => byte_run_end(tail, tail_at),
    }
}

/// [`plain_run_end`] a byte at a time, for the last few bytes (`bytes` starts at `at`).
fn byte_run_end(bytes: &[u8], at: usize) -> Option<(usize, u8)> {
    let end = bytes.iter().position(|&b| b < 0x20 || b == b'"' || b == b'\\')?;
    Some((at + end, bytes[end]))
}

/// Eight bytes as a little-endian word.
#[inline]
fn word(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]))
}

/// The high bit of each byte of `chunk` that is a quote, backslash or control
/// character, and maybe of bytes after such a one (a borrow runs upwards).
#[inline]
fn stops(chunk: u64) -> u64 {
    const ONES: u64 = u64::MAX / 255;
    let has = |byte: u8| {
        let x = chunk ^ (ONES * u64::from(byte));
        x.wrapping_sub(ONES) & !x
    };
    let control = chunk.wrapping_sub(ONES * 0x20) & !chunk;
    (control | has(b'"') | has(b'\\')) & (ONES << 7)
}

/// The position and byte of the first stop in `chunk` (at `at`), given its
/// nonzero [`stops`]: the lowest flagged byte.
#[inline]
fn first_stop(at: usize, chunk: u64, stops: u64) -> (usize, u8) {
    let shift = stops.trailing_zeros() & !7;
    (at + shift as usize / 8, (chunk >> shift) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::string::String;

    /// Whether the scanner takes `text` as one value, and `serde_json` too.
    fn agree(text: &str) {
        let mut scan = Scan::new(text);
        let ours = scan.value().is_some() && scan.at_end();
        let theirs = serde_json::from_str::<&serde_json::value::RawValue>(text).is_ok();
        // The scanner may give up where serde_json accepts (it then decides), never the reverse.
        assert!(!ours || theirs, "{text:?}: scanner {ours}, serde_json {theirs}");
        assert_eq!(ours, theirs, "{text:?}");
    }

    #[test]
    fn accepts_exactly_what_serde_json_accepts() {
        let cases = [
            "0",
            "-0",
            "01",
            "-",
            "1.",
            "1.5",
            "1e",
            "1e+",
            "1E-7",
            "-12.5e3",
            ".5",
            "+1",
            "1x",
            "true",
            "tru",
            "truex",
            "null",
            "nul",
            "false",
            r#""""#,
            r#""a\"b""#,
            r#""\u00e9\ud800""#,
            r#""\u00g0""#,
            r#""\x""#,
            "\"tab\there\"",
            "\"é ☃\"",
            "[]",
            "[ ]",
            "[1,]",
            "[,1]",
            "[1 2]",
            "{}",
            "{ }",
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"{1:2}"#,
            r#"{"a":[{"b":{}}],"c":"d"}"#,
            " \t\r\n[1, {\"x\" : null}] \n",
            "[1]]",
            "{\"a\":1}}",
            "",
            " ",
            "[\"\u{1}\"]",
            "\"abcdefghijklmnop\\\"qrstuvwxyz\"",
        ];
        for case in cases {
            agree(case);
        }
        for depth in [1, 63, 64, 65, 255, 256] {
            agree(&format!("{}{}", "[".repeat(depth), "]".repeat(depth)));
            let object: String = (0..depth).map(|_| r#"{"k":"#).collect();
            agree(&format!("{object}0{}", "}".repeat(depth)));
        }
        // Deeper than that, the scanner leaves the value to serde_json.
        let deep = format!("{}1{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(Scan::new(&deep).value(), None);
    }

    #[test]
    fn objects_hand_over_each_member() {
        let text = r#" {"a" : 1, "b\u0063":[true], "d":{"e":"f"}, "g":2} "#;
        let mut scan = Scan::new(text);
        let mut seen = alloc::vec::Vec::new();
        let object = scan.object(|scan| {
            let (key, escaped) = if scan.known_key(br#""g""#) { ("g", false) } else { scan.key()? };
            seen.push((key, escaped, scan.value()?));
            Some(())
        });
        assert_eq!(object, Some(text.trim()));
        assert!(scan.at_end());
        let expected =
            [("a", false, "1"), (r"b\u0063", true, "[true]"), ("d", false, r#"{"e":"f"}"#), ("g", false, "2")];
        assert_eq!(seen, expected);
    }

    #[test]
    fn known_keys_are_whole_keys_followed_by_a_colon() {
        for (text, known) in [(r#""id":1"#, true), (r#""id" : 1"#, true), (r#""idx":1"#, false), (r#""id",1"#, false)] {
            let mut scan = Scan::new(text);
            assert_eq!(scan.key_initial(), Some(b'i'));
            assert_eq!(scan.known_key(br#""id""#), known, "{text}");
            assert_eq!(scan.pos == 0, !known, "{text}");
        }
    }

    #[test]
    fn plain_runs_stop_at_quotes_backslashes_and_control_characters() {
        let cases = [
            ("abcdefghij\"", Some((10, b'"'))),
            ("abc\\", Some((3, b'\\'))),
            ("abcdefgh\u{7}", Some((8, 7))),
            ("é☃abcdefgh\\xyz", Some((13, b'\\'))),
            ("\u{1f}\"", Some((0, 0x1f))),
            ("abcdefgh", None),
            ("", None),
        ];
        for (text, end) in cases {
            assert_eq!(plain_run_end(text.as_bytes(), 0), end, "{text:?}");
        }
        // Every length and every place of the stop, against a byte-by-byte search.
        for len in 0..40 {
            for stop in [b'"', b'\\', 0x1f, 0] {
                for place in 0..=len {
                    let mut bytes = alloc::vec![b'a'; len];
                    if place < len {
                        bytes[place] = stop;
                    }
                    for from in [0, 1, 7, 9].into_iter().filter(|f| *f <= len) {
                        let naive = bytes[from..].iter().position(|&b| b < 0x20 || b == b'"' || b == b'\\');
                        let expected = naive.map(|end| (from + end, bytes[from + end]));
                        assert_eq!(plain_run_end(&bytes, from), expected, "{len} {stop} {place} {from}");
                    }
                }
            }
        }
    }
}
