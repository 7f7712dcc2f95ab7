//! Reading frames on the hot path: one pass of the scanner over the whole
//! frame finds the envelope's members and, for a request, its params' fields.
//! A frame the scanner does not recognise as a well-formed message (escaped
//! keys, repeated members, a bad id, not JSON at all) goes through [`parse_with_serde`],
//! which decides, so both ways give the same answer.

use alloc::borrow::Cow;

use super::fields::RawFields;
use super::scan::Scan;
use super::{parse_with_serde, FrameError, Message};

/// Reads one frame as [`parse_with_serde`] does, in one pass when it can; a
/// request's params' fields go to `fields` (empty before), and the flag says
/// whether they all did.
pub(crate) fn read<'a>(frame: &'a str, fields: &mut RawFields<'a>) -> Result<(Message<'a>, bool), FrameError> {
    let Some(members) = Members::scan(frame, fields) else { return parse_with_serde(frame).map(|m| (m, false)) };
    let found = members.fields_found;
    match members.classify() {
        Some(message) => Ok((message, found)),
        None => parse_with_serde(frame).map(|m| (m, false)),
    }
}

/// The envelope's members of a frame, raw; `null` counts as absent, as in [`parse`].
#[derive(Default)]
struct Members<'a> {
    jsonrpc: Option<&'a str>,
    id: Option<&'a str>,
    method: Option<&'a str>,
    params: Option<&'a str>,
    result: Option<&'a str>,
    error: Option<&'a str>,
    /// Which members were there, one bit each: a repeated one is an error.
    seen: u8,
    /// The params' fields were all found.
    fields_found: bool,
}

impl<'a> Members<'a> {
    /// The members of `frame`, its params' fields into `fields`; `None` when
    /// the frame is not a plain JSON object with each member once.
    fn scan(frame: &'a str, fields: &mut RawFields<'a>) -> Option<Self> {
        let mut members = Members::default();
        let mut scan = Scan::new(frame);
        if scan.next_token()? != b'{' {
            return None;
        }
        scan.object(|scan| members.member(scan, fields))?;
        scan.at_end().then_some(members)
    }

    /// Reads the member that comes next, key and value.
    fn member(&mut self, scan: &mut Scan<'a>, fields: &mut RawFields<'a>) -> Option<()> {
        let member = Member::next(scan)?;
        if member != Member::Other {
            let bit = 1 << member as u8;
            if self.seen & bit != 0 {
                return None;
            }
            self.seen |= bit;
        }
        match member {
            Member::Jsonrpc => self.jsonrpc = Some(if scan.known(br#""2.0""#) { "2.0" } else { scan.plain_string()? }),
            Member::Id => self.id = non_null(scan.value()?),
            Member::Method => self.method = Some(scan.plain_string()?),
            Member::Params => self.params = non_null(self.params(scan, fields)?),
            Member::Result => self.result = non_null(scan.value()?),
            Member::Error => self.error = non_null(scan.value()?),
            Member::Other => {
                scan.value()?;
            }
        }
        Some(())
    }

    /// The params' text; an object's fields go to `fields` on the way.
    fn params(&mut self, scan: &mut Scan<'a>, fields: &mut RawFields<'a>) -> Option<&'a str> {
        if scan.next_token()? != b'{' {
            return scan.value();
        }
        let (text, complete) = fields.scan_object(scan)?;
        self.fields_found = complete;
        Some(text)
    }

    /// The message these members make, when it is a valid one.
    fn classify(self) -> Option<Message<'a>> {
        if self.jsonrpc != Some("2.0") {
            return None;
        }
        let method = self.method.map(Cow::Borrowed);
        match (self.id, method, self.result, self.error) {
            (Some(id), Some(method), None, None) => {
                plain_id(id).then_some(Message::Request { id, method, params: self.params })
            }
            (None, Some(method), None, None) => Some(Message::Notification { method, params: self.params }),
            (Some(id), None, Some(result), None) => Some(Message::Response { id, result }),
            (id, None, None, Some(error)) => Some(Message::Error { id, error }),
            _ => None,
        }
    }
}

/// The envelope's members, and the others (ignored).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Member {
    Jsonrpc,
    Id,
    Method,
    Params,
    Result,
    Error,
    Other,
}

impl Member {
    /// Reads the key that comes next and its colon: compared with the member
    /// its first letter suggests, scanned only when it is another or has escapes
    /// (`None`: it has escapes, or is not a key).
    fn next(scan: &mut Scan<'_>) -> Option<Member> {
        let known = match scan.key_initial()? {
            b'j' => scan.known_key(br#""jsonrpc""#).then_some(Member::Jsonrpc),
            b'i' => scan.known_key(br#""id""#).then_some(Member::Id),
            b'm' => scan.known_key(br#""method""#).then_some(Member::Method),
            b'p' => scan.known_key(br#""params""#).then_some(Member::Params),
            b'r' => scan.known_key(br#""result""#).then_some(Member::Result),
            b'e' => scan.known_key(br#""error""#).then_some(Member::Error),
            _ => None,
        };
        if known.is_some() {
            return known;
        }
        match scan.key()? {
            (_, true) => None,
            (key, false) => Some(Member::named(key)),
        }
    }

    /// The member named `key`.
    fn named(key: &str) -> Member {
        match key {
            "jsonrpc" => Member::Jsonrpc,
            "id" => Member::Id,
            "method" => Member::Method,
            "params" => Member::Params,
            "result" => Member::Result,
            "error" => Member::Error,
            _ => Member::Other,
        }
    }
}

/// A raw value, `None` for `null` (as [`parse_with_serde`] reads it).
fn non_null(raw: &str) -> Option<&str> {
    (raw != "null").then_some(raw)
}

/// Whether a request id is plainly valid: a string, or an integer short enough
/// to fit any integer type. Other ids are for [`parse_with_serde`] to judge.
fn plain_id(id: &str) -> bool {
    let digits = id.strip_prefix('-').unwrap_or(id);
    id.starts_with('"') || (!digits.is_empty() && digits.len() <= 18 && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// A request id the gateway allocated (a non-negative integer), read without
/// `serde_json` when it is plain digits.
pub(crate) fn gateway_id(id: &str) -> Option<u64> {
    let plain = !id.is_empty() && id.len() <= 19 && id.bytes().all(|b| b.is_ascii_digit());
    if plain {
        return id.bytes().try_fold(0u64, |n, b| n.checked_mul(10)?.checked_add(u64::from(b - b'0')));
    }
    serde_json::from_str::<u64>(id).ok()
}

/// Checks that [`read`] gives what [`parse_with_serde`] gives for `frame` (the
/// same message or the same error), and that params' fields it found are the
/// ones `serde_json` finds: the promise the one-pass reading keeps.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn check_read_agrees(frame: &str) -> Result<(), alloc::string::String> {
    use alloc::format;
    let mut fields = RawFields::default();
    let ours = read(frame, &mut fields);
    let theirs = parse_with_serde(frame);
    let same = match (&ours, &theirs) {
        (Ok((a, _)), Ok(b)) => a == b,
        (Err(a), Err(b)) => a == b,
        _ => false,
    };
    if !same {
        return Err(format!("reading {frame:?} gave {ours:?}, parsing it {theirs:?}"));
    }
    if let Ok((Message::Request { params: Some(params), .. }, true)) = &ours {
        let parsed: Option<RawFields<'_>> = serde_json::from_str(params).ok();
        if parsed.as_ref().map(field_pairs) != Some(field_pairs(&fields)) {
            return Err(format!("the fields read from {params:?} are not the ones serde_json finds"));
        }
    }
    Ok(())
}

/// The fields, in order, as text.
#[cfg(any(test, feature = "fuzzing"))]
fn field_pairs<'a>(fields: &RawFields<'a>) -> alloc::vec::Vec<(alloc::string::String, &'a str)> {
    fields.iter().map(|(k, v)| (alloc::string::String::from(&**k), v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_agrees_with_parsing() {
        let frames = [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a__b","arguments":{"x":[1]}}}"#,
            r#" { "params" : {"n\u0061me":"x"} , "method":"m","id":"s","jsonrpc":"2.0"} "#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1,2]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":null}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/x","extra":{"a":[]}}"#,
            r#"{"jsonrpc":"2.0","id":12,"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":12,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":99999999999999999999,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":-5,"method":"p\u0069ng"}"#,
            r#"{"jsonrpc":null,"id":1,"method":"m"}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","result":{}}"#,
            r#"["2.0",1,"ping"]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m"} trailing"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,}}"#,
            "{nope",
            "",
        ];
        for frame in frames {
            check_read_agrees(frame).unwrap();
        }
    }

    #[test]
    fn a_request_read_in_one_pass_brings_its_params_fields() {
        let frame = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a__b","arguments":{}}}"#;
        let mut fields = RawFields::default();
        let Ok((Message::Request { params: Some(params), .. }, true)) = read(frame, &mut fields) else {
            panic!("not read in one pass")
        };
        assert_eq!(params, r#"{"name":"a__b","arguments":{}}"#);
        assert_eq!((fields.get("name"), fields.get("arguments")), (Some(r#""a__b""#), Some("{}")));
    }

    #[test]
    fn gateway_ids_are_non_negative_integers() {
        for (id, expected) in [("0", Some(0)), ("42", Some(42)), ("18446744073709551615", Some(u64::MAX))] {
            assert_eq!(gateway_id(id), expected, "{id}");
        }
        for id in ["18446744073709551616", "-1", "1.5", r#""3""#, "", "99999999999999999999"] {
            assert_eq!(gateway_id(id), None, "{id}");
        }
    }
}
