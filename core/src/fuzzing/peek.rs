//! What the checks read of a frame tether sent, without building a JSON tree:
//! the drivers look at every frame, and a full `Value` per frame was most of a
//! fuzz execution's time. Deserialising into these still rejects invalid JSON.

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// The envelope of a JSON-RPC message: which fields are present, raw.
#[derive(Deserialize)]
pub(super) struct Envelope<'a> {
    /// Present even when `null` (an error answer to an unreadable request).
    #[serde(default, borrow, deserialize_with = "present")]
    pub(super) id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub(super) method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub(super) params: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub(super) result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub(super) error: Option<&'a RawValue>,
}

/// The fields of a result the drivers follow: tasks, input rounds, tool errors.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct ResultFields<'a> {
    #[serde(default, borrow)]
    pub(super) task_id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub(super) task: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub(super) request_state: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub(super) input_requests: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub(super) is_error: Option<&'a RawValue>,
}

/// The `arguments` of a `tools/call` the drivers tagged with a call number.
#[derive(Deserialize)]
pub(super) struct CallParams<'a> {
    #[serde(default, borrow)]
    pub(super) arguments: Option<&'a RawValue>,
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

impl<'a> Envelope<'a> {
    /// Reads `frame`; an error when it is not one JSON object.
    pub(super) fn read(frame: &'a str) -> Result<Envelope<'a>, serde_json::Error> {
        if !frame.trim_start().starts_with('{') {
            return Err(serde::de::Error::custom("not a JSON object"));
        }
        serde_json::from_str(frame)
    }

    /// The result's followed fields (defaults when there is none, or it is not an object).
    pub(super) fn result_fields(&self) -> ResultFields<'a> {
        self.result.and_then(|r| serde_json::from_str(r.get()).ok()).unwrap_or_default()
    }
}

/// A raw JSON value as a string, when it is one.
pub(super) fn string(raw: Option<&RawValue>) -> Option<alloc::string::String> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
}
