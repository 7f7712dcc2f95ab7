//! The tools of the suite's `tasks-*` scenarios: `greet`, `slow_compute`,
//! `failing_job`, `protocol_error_job`, `confirm_delete`, `multi_input` and
//! `test_tool_with_task`.
//!
//! In handshake mode the fixture does not implement tasks and declares no `tasks`
//! capability: the gateway in front of it creates the tasks, so these tools only
//! behave like slow, long-running ones. The stateless mode runs the same tools as
//! its own tasks ([`crate::tasks`]), with an `elicit` that parks the task in
//! `input_required`. Their listings say, with `execution.taskSupport`, which of
//! them may (or must) run as a task. Each runs on its call's (or task's) own
//! thread; its pauses end at once when the call is cancelled (see [`Cancel`]).

use std::sync::{Condvar, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::catalog::{self, object_schema};
use crate::wire::{code, lock, text_result, tool_error, Answer, RpcError};

/// How long the jobs work before they finish or ask the user: long enough for a
/// task to be seen `working`, short enough for the suite's 10 s polls.
const JOB_DELAY: Duration = Duration::from_millis(1500);

/// The request id of `test_tool_with_task`'s question: a gateway serving a
/// stateless-era client names the `input_required` entry after it.
pub const USER_NAME_KEY: &str = "user_name";

/// The result a cancelled call returns. Never sent: the handshake mode drops the
/// answer of a call the client cancelled.
const CANCELLED: &str = "cancelled by the client";

/// Sends `elicitation/create` with these params (under the request id given, or a
/// fresh one) and waits for the client's answer; `Err` says why there is none.
pub type Elicit<'a> = &'a (dyn Fn(Option<&str>, Value) -> Result<Value, String> + Sync);

/// One running call's cancellation: set by the client's `notifications/cancelled`,
/// waited on by the tools' pauses so a cancel ends them at once.
#[derive(Default)]
pub struct Cancel {
    cancelled: Mutex<bool>,
    wake: Condvar,
}

impl Cancel {
    /// Marks the call cancelled and wakes its pause.
    pub fn cancel(&self) {
        *lock(&self.cancelled) = true;
        self.wake.notify_all();
    }

    /// Whether the client cancelled the call.
    pub fn is_cancelled(&self) -> bool {
        *lock(&self.cancelled)
    }

    /// Pauses for `duration` unless the call is (or gets) cancelled first; whether
    /// it was cancelled.
    fn sleep(&self, duration: Duration) -> bool {
        let cancelled = lock(&self.cancelled);
        let (cancelled, _) =
            self.wake.wait_timeout_while(cancelled, duration, |c| !*c).unwrap_or_else(PoisonError::into_inner);
        *cancelled
    }
}

/// The listing of a tool a gateway may run as a task: `support` is its
/// `execution.taskSupport` (`optional` or `required`).
fn task(name: &str, description: &str, input_schema: Value, support: &str) -> Value {
    json!({
        "name": name,
        "description": description,
        "inputSchema": input_schema,
        "execution": { "taskSupport": support }
    })
}

/// The listings of these tools, appended to the catalog's in handshake mode.
pub fn tools() -> Vec<Value> {
    let no_args = || object_schema(json!({}), &[]);
    let greet_schema = object_schema(json!({ "name": { "type": "string", "description": "Who to greet" } }), &["name"]);
    vec![
        json!({ "name": "greet", "description": "Greets someone at once (never a task)", "inputSchema": greet_schema }),
        task(
            "slow_compute",
            "Works for the given number of seconds, then returns; a cancel stops it",
            object_schema(
                json!({
                    "seconds": { "type": "integer", "minimum": 0, "description": "How long to work" },
                    "label": { "type": "string", "description": "Named in the result" }
                }),
                &["seconds", "label"],
            ),
            "optional",
        ),
        task("failing_job", "Fails with an isError result after 1.5 s", no_args(), "required"),
        task("protocol_error_job", "Fails with a JSON-RPC error (-32603) after 1.5 s", no_args(), "optional"),
        task(
            "confirm_delete",
            "After 1.5 s asks the user (elicitation) whether to delete the file",
            object_schema(
                json!({ "filename": { "type": "string", "description": "The file to delete" } }),
                &["filename"],
            ),
            "optional",
        ),
        task("multi_input", "After 1.5 s asks the user two questions at once (elicitation)", no_args(), "optional"),
        task(
            "test_tool_with_task",
            "Asks the user's name (elicitation), then works 1.5 s and greets them",
            no_args(),
            "required",
        ),
    ]
}

/// Runs the tool `name` if it is one of these (`None` otherwise). `cancel` is the
/// call's; `elicit` asks the user.
pub fn call(name: &str, args: &Map<String, Value>, cancel: &Cancel, elicit: Elicit<'_>) -> Option<Answer> {
    let result = match name {
        "greet" => match args.get("name").and_then(Value::as_str) {
            Some(name) => text_result(&format!("Hello, {name}!")),
            None => tool_error("missing required string argument 'name'"),
        },
        "slow_compute" => slow_compute(args, cancel),
        "failing_job" => after_delay(cancel, || tool_error("failing_job failed as designed")),
        "protocol_error_job" => {
            if cancel.sleep(JOB_DELAY) {
                text_result(CANCELLED)
            } else {
                let message = "protocol_error_job: internal failure as designed";
                return Some(Err(RpcError::new(code::INTERNAL_ERROR, message)));
            }
        }
        "confirm_delete" => match args.get("filename").and_then(Value::as_str) {
            Some(filename) => after_delay(cancel, || confirm_delete(filename, elicit)),
            None => tool_error("missing required string argument 'filename'"),
        },
        "multi_input" => after_delay(cancel, || multi_input(elicit)),
        "test_tool_with_task" => tool_with_task(cancel, elicit),
        _ => return None,
    };
    Some(Ok(result))
}

/// Runs `then` after [`JOB_DELAY`], unless the call is cancelled meanwhile.
fn after_delay(cancel: &Cancel, then: impl FnOnce() -> Value) -> Value {
    if cancel.sleep(JOB_DELAY) {
        text_result(CANCELLED)
    } else {
        then()
    }
}

/// `slow_compute`: pauses `seconds` (cut short by a cancel), then names its label.
fn slow_compute(args: &Map<String, Value>, cancel: &Cancel) -> Value {
    let Some(seconds) = args.get("seconds").and_then(whole_seconds) else {
        return tool_error("'seconds' must be a whole number of seconds, 0 or more");
    };
    let Some(label) = args.get("label").and_then(Value::as_str) else {
        return tool_error("missing required string argument 'label'");
    };
    if cancel.sleep(Duration::from_secs(seconds)) {
        return text_result(CANCELLED);
    }
    text_result(&format!("computed {label} in {seconds}s"))
}

/// A whole, non-negative number of seconds (`2` or `2.0`).
fn whole_seconds(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        let seconds = value.as_f64()?;
        // The cast saturates: a huge value just means "until cancelled".
        (seconds >= 0.0 && seconds.fract() == 0.0).then_some(seconds as u64)
    })
}

/// `confirm_delete`: deletes only on an accepted form with `confirm: true`; a
/// declined, cancelled or failed question keeps the file.
fn confirm_delete(filename: &str, elicit: Elicit<'_>) -> Value {
    let schema = object_schema(json!({ "confirm": { "type": "boolean", "description": "Delete it" } }), &["confirm"]);
    let answer = elicit(None, json!({ "message": format!("Delete {filename}?"), "requestedSchema": schema }));
    let confirmed = answer.is_ok_and(|a| a["action"] == "accept" && a["content"]["confirm"] == true);
    text_result(&format!("{} {filename}", if confirmed { "deleted" } else { "kept" }))
}

/// `multi_input`: two questions in flight together (one thread each), then both names.
fn multi_input(elicit: Elicit<'_>) -> Value {
    let schema = object_schema(json!({ "name": { "type": "string" }, "confirm": { "type": "boolean" } }), &["name"]);
    let ask = |message: &str| {
        let answer = elicit(None, json!({ "message": message, "requestedSchema": schema }));
        answer.ok().and_then(|a| a["content"]["name"].as_str().map(str::to_string)).unwrap_or_else(|| "nobody".into())
    };
    let (first, second) = thread::scope(|scope| {
        let first = scope.spawn(|| ask("First: what is your name?"));
        let second = scope.spawn(|| ask("Second: what is your name?"));
        let join = |handle: thread::ScopedJoinHandle<'_, String>| handle.join().unwrap_or_else(|_| "nobody".into());
        (join(first), join(second))
    });
    text_result(&format!("got {first} and {second}"))
}

/// `test_tool_with_task`: asks the user's name at once, then works 1.5 s and
/// greets them.
fn tool_with_task(cancel: &Cancel, elicit: Elicit<'_>) -> Value {
    let answer = match elicit(Some(USER_NAME_KEY), catalog::ask_string("What is your name?", "name")) {
        Ok(answer) => answer,
        Err(e) => return tool_error(&e),
    };
    let name = answer["content"]["name"].as_str().unwrap_or("stranger").to_string();
    after_delay(cancel, || text_result(&format!("Hello, {name}!")))
}
