//! JSON with comments and trailing commas (VS Code's `mcp.json` allows both), turned
//! into plain JSON for serde_json without moving any other byte.

/// Blanks `//` and `/* */` comments and trailing commas with spaces, keeping every
/// other byte (newlines included) in place so JSON errors keep their line and column.
pub(super) fn strip_jsonc(text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    blank_comments(&mut bytes);
    blank_trailing_commas(&mut bytes);
    // Only whole comments (ASCII-delimited) and ASCII commas were replaced, so the
    // bytes are still UTF-8; fall back to the original text rather than panic.
    String::from_utf8(bytes).unwrap_or_else(|_| text.to_string())
}

/// Walks `bytes` outside string literals, calling `visit` with each index there.
/// `visit` returns how many bytes it consumed (0 to let the walk step by one).
fn walk_outside_strings(bytes: &mut [u8], mut visit: impl FnMut(&mut [u8], usize) -> usize) {
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        if in_string {
            match bytes[i] {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
        } else if bytes[i] == b'"' {
            in_string = true;
            i += 1;
        } else {
            i += visit(bytes, i).max(1);
        }
    }
}

fn blank_comments(bytes: &mut [u8]) {
    walk_outside_strings(bytes, |b, i| {
        let end = match (b[i], b.get(i + 1)) {
            (b'/', Some(b'/')) => b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n),
            (b'/', Some(b'*')) => b[i + 2..].windows(2).position(|w| w == b"*/").map_or(b.len(), |n| i + 2 + n + 2),
            _ => return 0,
        };
        for c in &mut b[i..end] {
            if *c != b'\n' && *c != b'\r' {
                *c = b' ';
            }
        }
        end - i
    });
}

fn blank_trailing_commas(bytes: &mut [u8]) {
    walk_outside_strings(bytes, |b, i| {
        if b[i] == b',' {
            let next = b[i + 1..].iter().find(|c| !c.is_ascii_whitespace());
            if matches!(next, Some(b'}') | Some(b']')) {
                b[i] = b' ';
            }
        }
        0
    });
}
