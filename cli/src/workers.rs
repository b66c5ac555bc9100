//! `caduceus workers list | cordon NAME | uncordon NAME | drain NAME`: the
//! workers of a running coordinator (cordon, uncordon and drain need an
//! admin token; see the coordinator README, "Operations").

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use clap::Subcommand;
use serde_json::Value;

use caduceus_proto::{CordonWorkerRequest, DrainWorkerRequest, StatusRequest, WorkerStatus};

use crate::approvals::{RemoteArgs, remote_client};
use crate::config::Config;
use crate::target::Client;
use crate::{out, worker_json, worker_line};

#[derive(Subcommand)]
pub enum WorkersCommand {
    /// List the attached workers: state, backends, load, environments, labels.
    List {
        /// Print JSON (one array).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Give the worker no new environments; the ones it has carry on.
    Cordon {
        name: String,
        /// Print the worker as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Let a cordoned worker take new environments again.
    Uncordon {
        name: String,
        /// Print the worker as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Cordon the worker, let its running calls finish, end its
    /// environments; the worker process then exits 0.
    Drain {
        name: String,
        /// Return only once the worker has left the fleet (at most this many
        /// seconds; 0 = do not wait).
        #[arg(long, value_name = "SECONDS", default_value_t = 0)]
        wait: u64,
        /// Print the worker as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

async fn client(remote: &RemoteArgs, config: &Config) -> Result<Client> {
    remote_client(
        remote,
        config,
        "workers belong to a running coordinator: pass --coordinator or set CADUCEUS_COORDINATOR",
    )
    .await
}

async fn workers(client: &mut Client) -> Result<Vec<WorkerStatus>> {
    Ok(client
        .status(StatusRequest {})
        .await
        .map_err(|s| anyhow!("{}", s.message()))?
        .into_inner()
        .workers)
}

pub async fn run(command: WorkersCommand, config: &Config) -> Result<()> {
    match command {
        WorkersCommand::List { json, remote } => {
            let list = workers(&mut client(&remote, config).await?).await?;
            if json {
                let list: Vec<Value> = list.iter().map(worker_json).collect();
                return out(&serde_json::to_string_pretty(&list)?);
            }
            if list.is_empty() {
                return out("no workers attached");
            }
            for w in &list {
                out(&worker_line(w))?;
            }
            Ok(())
        }
        WorkersCommand::Cordon { name, json, remote } => {
            cordon(&remote, config, name, true, json).await
        }
        WorkersCommand::Uncordon { name, json, remote } => {
            cordon(&remote, config, name, false, json).await
        }
        WorkersCommand::Drain {
            name,
            wait,
            json,
            remote,
        } => {
            let mut client = client(&remote, config).await?;
            let worker = client
                .drain_worker(DrainWorkerRequest { name: name.clone() })
                .await
                .map_err(|s| anyhow!("{}", s.message()))?
                .into_inner()
                .worker
                .unwrap_or_default();
            if wait > 0 {
                let deadline = Instant::now() + Duration::from_secs(wait);
                while workers(&mut client).await?.iter().any(|w| w.name == name) {
                    if Instant::now() >= deadline {
                        bail!("the worker '{name}' is draining but had not left after {wait}s");
                    }
                    // Status has no change stream; a drain ends in seconds.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            if json {
                let mut shown = worker_json(&worker);
                shown["left"] = Value::Bool(wait > 0);
                return out(&serde_json::to_string_pretty(&shown)?);
            }
            out(&if wait > 0 {
                format!("drained {name}: its environments ended and it left the fleet")
            } else {
                format!(
                    "draining {name}: no new environments; it exits once its running calls finish"
                )
            })
        }
    }
}

async fn cordon(
    remote: &RemoteArgs,
    config: &Config,
    name: String,
    cordon: bool,
    json: bool,
) -> Result<()> {
    let worker = client(remote, config)
        .await?
        .cordon_worker(CordonWorkerRequest {
            name: name.clone(),
            cordon,
        })
        .await
        .map_err(|s| anyhow!("{}", s.message()))?
        .into_inner()
        .worker
        .unwrap_or_default();
    if json {
        return out(&serde_json::to_string_pretty(&worker_json(&worker))?);
    }
    out(&if cordon {
        format!(
            "cordoned {name}: no new environments; its {} carry on",
            environments(&worker)
        )
    } else {
        format!("uncordoned {name}: it takes new environments again")
    })
}

fn environments(worker: &WorkerStatus) -> String {
    match worker.placed_environments {
        1 => "1 environment".to_owned(),
        n => format!("{n} environments"),
    }
}
