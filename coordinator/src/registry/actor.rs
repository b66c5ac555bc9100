//! The `Registry` actor: the single writer of the tool registry. Every write
//! produces a new immutable snapshot, published through an `ArcSwap` so that
//! the call pipeline reads the registry with one atomic load and no lock.

use std::collections::BTreeSet;
use std::sync::Arc;

use arc_swap::ArcSwap;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use super::{Caller, RegistryError, ToolEntry, ToolRegistry};
use crate::ask;

/// Messages the registry actor accepts. Every write replies once applied, so
/// a caller that awaits the reply sees its change in the next snapshot.
pub enum RegistryMsg {
    Register {
        entry: Box<ToolEntry>,
        override_existing: bool,
        reply: RpcReplyPort<Result<(), RegistryError>>,
    },
    Deregister {
        name: String,
        caller: Caller,
        reply: RpcReplyPort<Result<bool, RegistryError>>,
    },
    RegisterAlias {
        alias: String,
        toolset: String,
        reply: RpcReplyPort<()>,
    },
    SetPluginOverridePolicy {
        plugin: String,
        allowed: bool,
    },
    /// The set of backends offered by the attached workers changed. Replies
    /// once the new snapshot is published.
    SetFleetBackends {
        backends: BTreeSet<String>,
        reply: RpcReplyPort<()>,
    },
    SetFleetToolsets {
        toolsets: BTreeSet<String>,
        reply: RpcReplyPort<()>,
    },
}

pub struct Registry;

pub struct RegistryArgs {
    pub initial: ToolRegistry,
    pub published: Arc<ArcSwap<ToolRegistry>>,
}

pub struct RegistryState {
    current: ToolRegistry,
    published: Arc<ArcSwap<ToolRegistry>>,
}

impl RegistryState {
    fn publish(&self) {
        self.published.store(Arc::new(self.current.clone()));
    }
}

impl Actor for Registry {
    type Msg = RegistryMsg;
    type State = RegistryState;
    type Arguments = RegistryArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: RegistryArgs,
    ) -> Result<RegistryState, ActorProcessingErr> {
        let state = RegistryState {
            current: args.initial,
            published: args.published,
        };
        state.publish();
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: RegistryMsg,
        state: &mut RegistryState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RegistryMsg::Register {
                entry,
                override_existing,
                reply,
            } => {
                let name = entry.name.clone();
                let outcome = state.current.register(*entry, override_existing);
                match &outcome {
                    Ok(()) => state.publish(),
                    Err(err) => tracing::error!(tool = %name, "tool registration rejected: {err}"),
                }
                let _ = reply.send(outcome);
            }
            RegistryMsg::Deregister {
                name,
                caller,
                reply,
            } => {
                let outcome = state.current.deregister(&name, &caller);
                if matches!(outcome, Ok(true)) {
                    state.publish();
                }
                let _ = reply.send(outcome);
            }
            RegistryMsg::RegisterAlias {
                alias,
                toolset,
                reply,
            } => {
                state.current.register_alias(&alias, &toolset);
                state.publish();
                let _ = reply.send(());
            }
            RegistryMsg::SetPluginOverridePolicy { plugin, allowed } => {
                state.current.set_plugin_override_policy(&plugin, allowed);
                state.publish();
            }
            RegistryMsg::SetFleetBackends { backends, reply } => {
                if state.current.set_fleet_backends(backends) {
                    tracing::debug!(backends = ?state.current.fleet_backends(), "fleet backends changed");
                    state.publish();
                }
                let _ = reply.send(());
            }
            RegistryMsg::SetFleetToolsets { toolsets, reply } => {
                if state.current.set_fleet_toolsets(toolsets) {
                    tracing::debug!(toolsets = ?state.current.fleet_toolsets(), "fleet toolsets changed");
                    state.publish();
                }
                let _ = reply.send(());
            }
        }
        Ok(())
    }
}

/// A cheap, cloneable handle: reads go to the published snapshot, writes to
/// the actor.
#[derive(Clone)]
pub struct RegistryHandle {
    actor: ActorRef<RegistryMsg>,
    published: Arc<ArcSwap<ToolRegistry>>,
}

impl RegistryHandle {
    /// Starts the registry actor with `initial` as its first snapshot.
    pub async fn start(
        initial: ToolRegistry,
    ) -> Result<(Self, tokio::task::JoinHandle<()>), ractor::SpawnErr> {
        let published = Arc::new(ArcSwap::from_pointee(initial.clone()));
        let (actor, join) = Actor::spawn(
            None,
            Registry,
            RegistryArgs {
                initial,
                published: published.clone(),
            },
        )
        .await?;
        Ok((RegistryHandle { actor, published }, join))
    }

    /// The current snapshot: one atomic load.
    pub fn snapshot(&self) -> Arc<ToolRegistry> {
        self.published.load_full()
    }

    pub async fn register(
        &self,
        entry: ToolEntry,
        override_existing: bool,
    ) -> Result<(), RegistryError> {
        ask(&self.actor, |reply| RegistryMsg::Register {
            entry: Box::new(entry),
            override_existing,
            reply,
        })
        .await
        .unwrap_or(Err(RegistryError::Unavailable))
    }

    pub async fn deregister(&self, name: &str, caller: Caller) -> Result<bool, RegistryError> {
        ask(&self.actor, |reply| RegistryMsg::Deregister {
            name: name.to_owned(),
            caller,
            reply,
        })
        .await
        .unwrap_or(Err(RegistryError::Unavailable))
    }

    pub async fn register_alias(&self, alias: &str, toolset: &str) -> Result<(), RegistryError> {
        ask(&self.actor, |reply| RegistryMsg::RegisterAlias {
            alias: alias.to_owned(),
            toolset: toolset.to_owned(),
            reply,
        })
        .await
        .ok_or(RegistryError::Unavailable)
    }

    /// Publishes the fleet's backends and waits until the snapshot shows them,
    /// so that a worker that has joined is usable by the very next call.
    pub async fn set_fleet_backends(&self, backends: BTreeSet<String>) {
        ask(&self.actor, |reply| RegistryMsg::SetFleetBackends {
            backends,
            reply,
        })
        .await;
    }

    /// Publishes the toolsets the fleet's workers serve (see
    /// [`Availability::WorkerToolset`](super::Availability::WorkerToolset)).
    pub async fn set_fleet_toolsets(&self, toolsets: BTreeSet<String>) {
        ask(&self.actor, |reply| RegistryMsg::SetFleetToolsets {
            toolsets,
            reply,
        })
        .await;
    }

    pub fn set_plugin_override_policy(&self, plugin: &str, allowed: bool) {
        let _ = self.actor.cast(RegistryMsg::SetPluginOverridePolicy {
            plugin: plugin.to_owned(),
            allowed,
        });
    }

    pub fn stop(&self) {
        self.actor.stop(None);
    }
}
