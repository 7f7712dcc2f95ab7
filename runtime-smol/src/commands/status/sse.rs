//! Reading tether's `/events`: the server-sent events line format (`id:`,
//! `event:`, `data:` fields, `:` comments, a blank line ending each event).

/// One event of the stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// Its `id:` (what `Last-Event-ID` resumes after), if it had one.
    pub id: Option<String>,
    /// Its `event:` type (`message` when it had none).
    pub event: String,
    /// Its `data:` lines, joined by `\n`.
    pub data: String,
}

/// Collects lines into events.
#[derive(Debug, Default)]
pub struct SseParser {
    id: Option<String>,
    event: Option<String>,
    data: Vec<String>,
}

impl SseParser {
    /// Takes one line (without its line ending); returns the event a blank line
    /// completes. Comments (`: keep-alive`) and unknown fields are skipped; an
    /// event without data is dropped, as the format says.
    pub fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let id = self.id.take();
            let event = self.event.take().unwrap_or_else(|| "message".to_string());
            let data = std::mem::take(&mut self.data);
            return (!data.is_empty()).then(|| SseEvent { id, event, data: data.join("\n") });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => self.data.push(value.to_string()),
            "event" => self.event = Some(value.to_string()),
            "id" => self.id = Some(value.to_string()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        text.lines().filter_map(|l| parser.line(l)).collect()
    }

    #[test]
    fn events_end_at_blank_lines_and_comments_are_skipped() {
        let text = ": tether events\n\nid: 17\nevent: tether\ndata: {\"seq\":17}\n\n: keep-alive\n\ndata:a\ndata: b\nretry: 10\n\n";
        assert_eq!(
            parse(text),
            [
                SseEvent { id: Some("17".into()), event: "tether".into(), data: "{\"seq\":17}".into() },
                SseEvent { id: None, event: "message".into(), data: "a\nb".into() },
            ]
        );
    }

    #[test]
    fn an_unfinished_event_is_not_returned() {
        assert_eq!(parse("id: 1\nevent: tether\ndata: {}\n"), []);
        assert_eq!(parse("id: 1\nevent: tether\n\n"), [], "no data: no event");
    }
}
