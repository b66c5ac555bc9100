//! The agent settings of a coordinator from the configuration: the `llm:`
//! section (into `caduceus_llm::LlmConfig`, then `OPENAI_BASE_URL`,
//! `OPENAI_API_KEY`, `CADUCEUS_MODEL`), `delegation:`, `agent.max_turns`
//! (`CADUCEUS_MAX_ITERATIONS`), and the session database
//! `$CADUCEUS_HOME/state.db`.

use std::sync::Arc;

use anyhow::{Context, Result};

use caduceus_coordinator::agent::{AgentSettings, DelegationConfig};
use caduceus_llm::LlmConfig;

use crate::config::{Config, home_dir};

/// The `agent:` section.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct AgentSection {
    /// hermes' name for the budget of a top-level session (default 90).
    max_turns: Option<u32>,
    /// Seconds a clarify question waits for its answer (default 600).
    clarify_timeout_seconds: Option<u64>,
}

pub fn agent_settings(config: &Config) -> Result<AgentSettings> {
    let llm: LlmConfig = match &config.llm {
        Some(section) => serde_yaml::from_value(section.clone())
            .context("invalid llm section in the configuration")?,
        None => LlmConfig::default(),
    };
    let delegation: DelegationConfig = match &config.delegation {
        Some(section) => serde_yaml::from_value(section.clone())
            .context("invalid delegation section in the configuration")?,
        None => DelegationConfig::default(),
    };
    let agent: AgentSection = match &config.agent {
        Some(section) => serde_yaml::from_value(section.clone())
            .context("invalid agent section in the configuration")?,
        None => AgentSection::default(),
    };
    let mut settings = AgentSettings {
        llm: llm.with_overrides_from(caduceus_common::process_env::var),
        delegation: Arc::new(delegation),
        state_db: Some(home_dir().join("state.db")),
        ..AgentSettings::default()
    };
    let from_env = std::env::var("CADUCEUS_MAX_ITERATIONS")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok());
    if let Some(turns) = from_env.or(agent.max_turns).filter(|n| *n > 0) {
        settings.max_iterations = turns;
    }
    if let Some(seconds) = agent.clarify_timeout_seconds.filter(|s| *s > 0) {
        settings.clarify_timeout = std::time::Duration::from_secs(seconds);
    }
    Ok(settings)
}

/// The auxiliary vision model from `auxiliary.vision` (`AUXILIARY_VISION_MODEL`
/// names the model, as in hermes); `None` when no model is named. Without a
/// `base_url` of its own it uses the `llm:` endpoint and key.
pub fn vision_model(
    config: &Config,
    llm: &LlmConfig,
) -> Result<Option<caduceus_coordinator::dispatch::vision::VisionModel>> {
    let section = &config.auxiliary.vision;
    let model = caduceus_common::process_env::var("AUXILIARY_VISION_MODEL")
        .or_else(|| section.model.clone())
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty());
    let Some(model) = model else {
        return Ok(None);
    };
    let own_endpoint = section.base_url.as_deref().filter(|u| !u.trim().is_empty());
    let timeout = section.timeout.filter(|t| *t > 0.0).unwrap_or(120.0);
    let vision = LlmConfig {
        base_url: own_endpoint.map_or_else(|| llm.base_url.clone(), str::to_owned),
        api_key: match own_endpoint {
            Some(_) => section.api_key.clone(),
            None => section.api_key.clone().or_else(|| llm.api_key.clone()),
        },
        extra_headers: if own_endpoint.is_some() {
            Default::default()
        } else {
            llm.extra_headers.clone()
        },
        model,
        stream: false,
        timeout_seconds: timeout,
        max_retries: 1,
        ..LlmConfig::default()
    };
    if let Some(key) = &vision.api_key {
        caduceus_common::redact::register_secret(key);
    }
    let client = caduceus_llm::model_from_config(&vision)
        .context("invalid auxiliary.vision model in the configuration")?;
    Ok(Some(caduceus_coordinator::dispatch::vision::VisionModel {
        model: client,
        timeout: std::time::Duration::from_secs_f64(timeout),
        temperature: section.temperature.unwrap_or(0.1),
    }))
}
