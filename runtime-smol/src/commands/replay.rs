//! `tether replay TRACE`: a recorded trace run through the engine again, its
//! actions printed, so a problem seen once can be read step by step.

use std::path::Path;
use std::process::ExitCode;

/// `tether replay TRACE`: the actions a trace produces, one per line.
pub fn replay(path: &Path, json: bool) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let actions = tether_core::trace::replay(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if json {
        for (at, action) in &actions {
            let line = serde_json::json!({ "at": at, "action": action });
            println!("{line}");
        }
    } else {
        print!("{}", tether_core::trace::render(&actions));
    }
    Ok(ExitCode::SUCCESS)
}
