//! The texts the loop writes for the model: the root system prompt, and the
//! model's own text cleaned for summaries.

use super::*;

/// Drops `<think>…</think>` blocks some models put before their answer.
pub(super) fn strip_think(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = rest[start + end + "</think>".len()..].trim_start(),
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out.trim().to_owned()
}

/// The system prompt of a top-level session; `memory` is the memory
/// snapshot taken as the session starts.
pub(super) fn root_system_prompt(tools: &BTreeSet<String>, memory: Option<&str>) -> String {
    let mut prompt = String::from(
        "You are an AI agent run by caduceus. You complete the user's task by calling the tools you are given. Worker tools run on worker hosts inside this session's environment, which persists between calls: files, the working directory and shell variables stay.\n\n\
- Act rather than describe: inspect, change, verify.\n\
- Several tool calls in one turn are fine: read-only calls and file edits on different paths run in parallel; everything else runs in order.\n",
    );
    if tools.contains("delegate_task") {
        prompt.push_str(
            "- delegate_task hands independent subtasks to subagents that run in parallel, each in its own environment (possibly on another worker host). The call returns when all of them have finished.\n",
        );
    }
    if tools.contains("todo") {
        prompt.push_str("- For work with three or more steps, keep a plan with the todo tool.\n");
    }
    if tools.contains("memory") {
        prompt.push_str("- Save durable facts about the user and the environment with the memory tool; what it holds is shown below as it was when this session started.\n");
    }
    if tools.contains("session_search") {
        prompt.push_str("- session_search finds what was said in earlier sessions.\n");
    }
    if tools.contains("cronjob") {
        prompt.push_str("- Work for later or on a schedule goes to the cronjob tool; a job runs in a fresh session that knows nothing of this one.\n");
    }
    if tools.contains("skill_view") {
        prompt.push_str("- Before a task that a skill covers, load it with skill_view (skills_list shows them); save a reusable procedure with skill_manage.\n");
    }
    prompt.push_str(
        "\nWhen you are done, answer with a concise summary of what you did and what you found.",
    );
    if let Some(memory) = memory.filter(|_| tools.contains("memory")) {
        prompt.push_str("\n\n");
        prompt.push_str(memory);
    }
    prompt
}
