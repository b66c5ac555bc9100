//! Decoding of the worker link's messages: any bytes decode to a `WorkerEvent` or
//! `WorkerCommand` or are refused, and a decoded message survives a re-encode.
#![no_main]

use caduceus_proto::{WorkerCommand, WorkerEvent};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    if let Ok(event) = WorkerEvent::decode(data) {
        let again = WorkerEvent::decode(event.encode_to_vec().as_slice());
        assert_eq!(again.ok(), Some(event));
    }
    if let Ok(command) = WorkerCommand::decode(data) {
        let again = WorkerCommand::decode(command.encode_to_vec().as_slice());
        assert_eq!(again.ok(), Some(command));
    }
});
