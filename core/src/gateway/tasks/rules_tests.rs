//! The task rules on their own: what a tool call becomes by the client's form,
//! the tool's task support and what the backend runs itself.

use super::*;
use crate::catalog::TaskSupport;
use crate::config::{Policy, ServerConfig, Tasks};
use crate::gateway::backend::Backend;
use crate::gateway::sessions::Session;
use crate::io::Status;
use crate::supervisor::Supervisor;
use serde_json::json;

const T0: Instant = Instant::ZERO;

/// Sessions: 1 stateless declaring tasks, 2 stateless not declaring them,
/// 3 of 2025-11-25, 4 of an older revision. Backends: `plain`, and `runs`
/// (a 2025-11-25 backend that takes tasks for tools/call).
fn setup() -> (Sessions, Backends) {
    let mut sessions = Sessions::default();
    let stateless = |caps: serde_json::Value| {
        let mut s = Session::new(true, T0);
        s.era = Era::Stateless;
        s.request_caps = caps.as_object().cloned();
        s
    };
    let revision = |v: &str| {
        let mut s = Session::new(true, T0);
        s.protocol_version = Some(v.into());
        s
    };
    sessions.open.insert(SessionId(1), stateless(json!({"extensions": {EXTENSION: {}}})));
    sessions.open.insert(SessionId(2), stateless(json!({})));
    sessions.open.insert(SessionId(3), revision(EXPERIMENTAL_REVISION));
    sessions.open.insert(SessionId(4), revision("2025-06-18"));
    let mut backends = Backends::default();
    for (name, caps) in [("plain", json!({})), ("runs", json!({"tasks": {"requests": {"tools": {"call": {}}}}}))] {
        let mut sup = Supervisor::new(true, false, Policy::default(), T0);
        sup.set_status(Status::Online, None);
        let mut b = Backend::new(ServerConfig::stdio("x", &[]), sup);
        b.capabilities = caps.as_object().cloned().unwrap_or_default();
        backends.insert(name.into(), b);
    }
    (sessions, backends)
}

#[test]
fn a_call_becomes_a_task_by_the_clients_form_and_the_tools_support() {
    let (sessions, backends) = setup();
    let tasks = Tasks::default();
    let rules = TaskRules { sessions: &sessions, backends: &backends, tasks: &tasks, now: T0 };
    let window = TaskPlan::Window(T0 + Duration::from_millis(tasks.sync_window_ms));
    let plan = |session: u64, support, asked| rules.plan(SessionId(session), "plain", support, asked);
    // The extension: a declaring client's call may become a task after the window.
    assert_eq!(plan(1, TaskSupport::Optional, false), window);
    assert_eq!(plan(1, TaskSupport::Forbidden, false), TaskPlan::Direct);
    assert_eq!(plan(2, TaskSupport::Required, false), TaskPlan::RefuseRequired);
    assert_eq!(plan(2, TaskSupport::Optional, false), TaskPlan::Direct);
    // 2025-11-25: a task when asked for, refused where the tool forbids or requires it.
    assert_eq!(plan(3, TaskSupport::Optional, true), TaskPlan::Now);
    assert_eq!(plan(3, TaskSupport::Forbidden, true), TaskPlan::RefuseForbidden);
    assert_eq!(plan(3, TaskSupport::Required, false), TaskPlan::RefuseRequired);
    // Older revisions know nothing of tasks.
    assert_eq!(plan(4, TaskSupport::Required, true), TaskPlan::Direct);
    // A backend that runs tasks in the client's form decides itself.
    assert_eq!(rules.plan(SessionId(3), "runs", TaskSupport::Forbidden, true), TaskPlan::PassThrough);
    let off = Tasks { max_tasks: 0, ..Tasks::default() };
    let rules = TaskRules { tasks: &off, ..rules };
    assert_eq!(rules.plan(SessionId(3), "plain", TaskSupport::Optional, true), TaskPlan::Direct, "tasks off");
}

#[test]
fn tools_of_backends_that_do_not_run_tasks_are_listed_as_optional_to_2025_11_25_clients_only() {
    let (sessions, backends) = setup();
    let tasks = Tasks::default();
    let rules = TaskRules { sessions: &sessions, backends: &backends, tasks: &tasks, now: T0 };
    assert!(rules.listed_support(SessionId(4), crate::catalog::ListKind::Tools).is_none());
    assert!(rules.listed_support(SessionId(3), crate::catalog::ListKind::Prompts).is_none());
    let edit = rules.listed_support(SessionId(3), crate::catalog::ListKind::Tools).expect("edits");
    let mut catalog = crate::catalog::Catalog::new("__");
    for server in ["plain", "runs"] {
        catalog.register(server, true);
        let tool = json!({"name": "t", "inputSchema": {"type": "object"}}).as_object().cloned().unwrap_or_default();
        catalog.install(server, [alloc::vec![tool], alloc::vec![], alloc::vec![], alloc::vec![]]);
    }
    let mut out = String::new();
    let plain = catalog.resolve_tool("plain__t").expect("listed").entry;
    assert!(edit("plain", plain, &mut out));
    let edited: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(edited["execution"]["taskSupport"], "optional");
    assert_eq!(edited["name"], "plain__t");
    let runs = catalog.resolve_tool("runs__t").expect("listed").entry;
    assert!(!edit("runs", runs, &mut String::new()), "its backend says for itself");
}
