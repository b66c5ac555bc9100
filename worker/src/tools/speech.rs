//! `text_to_speech`: offline speech with `espeak-ng` on the worker's host,
//! the WAV written into the task's environment (any backend: the bytes go
//! in through the sandbox's file access, so a container needs no espeak).

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;

use caduceus_common::result::{ToolReply, tool_error_with};
use caduceus_files::{FileToolContext, FileToolsConfig};

use crate::env::Environment;

pub const TOOL: &str = "text_to_speech";
/// Longer text is cut (hermes caps every provider; espeak has no limit of
/// its own, but a minute of speech per call is plenty and bounds the run).
const MAX_TEXT_CHARS: usize = 10_000;
const SYNTH_TIMEOUT: Duration = Duration::from_secs(120);

/// Where the voice comes from.
#[derive(Debug, Clone)]
pub struct SpeechSettings {
    /// The `espeak-ng` binary; `None`: the tool is not offered.
    pub espeak: Option<String>,
    /// Where the worker writes the audio before it goes into the environment.
    pub scratch_dir: std::path::PathBuf,
}

impl Default for SpeechSettings {
    fn default() -> Self {
        SpeechSettings {
            espeak: find_espeak(),
            scratch_dir: std::env::temp_dir(),
        }
    }
}

/// `CADUCEUS_ESPEAK` or `espeak-ng` on PATH.
pub fn find_espeak() -> Option<String> {
    if let Ok(path) = std::env::var("CADUCEUS_ESPEAK")
        && !path.is_empty()
    {
        return Some(path);
    }
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .map(|dir| std::path::Path::new(dir).join("espeak-ng"))
        .find(|candidate| candidate.is_file())
        .map(|p| p.to_string_lossy().into_owned())
}

fn failure(message: String) -> ToolReply {
    let mut extra = Map::new();
    extra.insert("success".to_owned(), Value::Bool(false));
    ToolReply::new(
        caduceus_common::result::CallStatus::Error,
        tool_error_with(message, extra),
    )
}

pub async fn run(
    settings: &SpeechSettings,
    files: &FileToolsConfig,
    env: &Environment,
    args: &Map<String, Value>,
) -> ToolReply {
    let text = args.get("text").and_then(Value::as_str).unwrap_or("");
    if text.trim().is_empty() {
        return failure("Text is required".to_owned());
    }
    let Some(program) = settings.espeak.as_deref() else {
        return failure(
            "TTS dependency missing (espeak-ng): install it on the worker (apt-get install espeak-ng)"
                .to_owned(),
        );
    };
    let text: String = text.chars().take(MAX_TEXT_CHARS).collect();
    let path = match args
        .get("output_path")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        // A path the model chose is a write like `write_file`'s: the same
        // guards (credential files, system paths, the write safe root).
        Some(asked) => match checked_output_path(files, env, asked).await {
            Ok(path) => path,
            Err(message) => return failure(message),
        },
        None => default_output_path(env),
    };
    let audio = match synthesize(program, &settings.scratch_dir, &text).await {
        Ok(audio) => audio,
        Err(err) => return failure(format!("TTS generation failed (espeak-ng): {err}")),
    };
    if let Err(err) = env.sandbox.files().write_atomic(&path, &audio).await {
        return failure(format!(
            "TTS generation failed (espeak-ng): writing {path}: {err}"
        ));
    }
    ToolReply::json(&json!({
        "success": true,
        "file_path": path,
        "media_tag": format!("MEDIA:{path}"),
        "provider": "espeak-ng",
        "voice_compatible": false,
    }))
}

/// The model's `output_path` resolved in the environment (`~`, relative to
/// the shell's cwd), or the file tools' refusal of it.
async fn checked_output_path(
    files: &FileToolsConfig,
    env: &Environment,
    asked: &str,
) -> Result<String, String> {
    let fs = env.sandbox.files();
    let cwd = env.shell.cwd();
    let home = env.sandbox.home_dir();
    let ctx = FileToolContext {
        fs: fs.as_ref(),
        cwd: &cwd,
        home: Some(&home),
        tracker: &env.reads,
        config: files,
    };
    ctx.check_write(asked)
        .await
        .map(|(resolved, _)| resolved)
        .map_err(|refusal| refusal.message().to_owned())
}

/// `<tmp>/caduceus-audio/tts_<ms>.wav`.
fn default_output_path(env: &Environment) -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    format!(
        "{}/caduceus-audio/tts_{ms}.wav",
        env.sandbox.temp_dir().trim_end_matches('/')
    )
}

/// Runs espeak-ng with the text on stdin (never as an argument, where a
/// leading `-` would be an option) into a scratch file: to a pipe it writes
/// a WAV header with unknown lengths, which audio readers reject.
async fn synthesize(
    program: &str,
    scratch: &std::path::Path,
    text: &str,
) -> Result<Vec<u8>, String> {
    let file = scratch.join(format!(
        "caduceus-tts-{}.wav",
        uuid::Uuid::new_v4().simple()
    ));
    let mut child = tokio::process::Command::new(program)
        .arg("--stdin")
        .arg("-w")
        .arg(&file)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| format!("could not start {program}: {err}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .await
            .map_err(|err| err.to_string())?;
    }
    let result = tokio::time::timeout(SYNTH_TIMEOUT, child.wait_with_output()).await;
    let audio = match result {
        Err(_) => Err(format!("timed out after {} s", SYNTH_TIMEOUT.as_secs())),
        Ok(Err(err)) => Err(err.to_string()),
        Ok(Ok(out)) if !out.status.success() => Err(format!(
            "{program} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(Ok(_)) => tokio::fs::read(&file).await.map_err(|err| err.to_string()),
    };
    let _ = tokio::fs::remove_file(&file).await;
    match audio {
        Ok(bytes) if bytes.len() > 44 => Ok(bytes),
        Ok(_) => Err("TTS generation produced no output".to_owned()),
        Err(err) => Err(err),
    }
}
