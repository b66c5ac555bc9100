//! Modal's gRPC API, the subset caduceus speaks (see `README.md`): the
//! control plane `modal.client.ModalClient` and the task command router
//! `modal.task_command_router.TaskCommandRouter`, clients and servers.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

pub mod client {
    tonic::include_proto!("modal.client");
}

pub mod task_command_router {
    tonic::include_proto!("modal.task_command_router");
}
