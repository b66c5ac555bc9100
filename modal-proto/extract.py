#!/usr/bin/env python3
"""Writes modal-proto/modal_proto/{api,task_command_router}.proto: the subset of Modal's gRPC API that caduceus
uses, reconstructed from the descriptors the `modal` wheel embeds (it ships no
.proto). Run with the Python of a venv that has the pinned wheel installed:

    ~/.cache/caduceus/modal-1.6.4/bin/python modal-proto/extract.py modal-proto/modal_proto

Only the listed RPCs and messages are kept; a kept message loses the fields
whose types are not kept (the wire ignores unknown fields, so both sides stay
compatible with the full definitions)."""

import sys

import modal_version
from google.protobuf import descriptor_pb2
from modal_proto import api_pb2, task_command_router_pb2

API_METHODS = [
    "ClientHello", "AuthTokenGet", "AppGetOrCreate", "EnvironmentGetOrCreate",
    "ImageGetOrCreate", "ImageJoinStreaming",
    "SandboxCreate", "SandboxCreateV2", "SandboxGetTaskId", "SandboxGetTaskIdV2",
    "SandboxGetCommandRouterAccess", "TaskGetCommandRouterAccess",
    "SandboxWait", "SandboxWaitV2", "SandboxTerminate", "SandboxTerminateV2",
    "SandboxList", "SandboxListV2", "SandboxTagsSet", "SandboxTagsSetV2",
    "SandboxTagsGet", "SandboxTagsGetV2", "SandboxSnapshotFs",
]
TCR_METHODS = [
    "TaskExecStart", "TaskExecStdioRead", "TaskExecStdinWrite", "TaskExecWait",
    "TaskExecPoll", "TaskSnapshotFilesystem",
]
# Messages kept because kept fields use them.
API_EXTRA = [
    "GenericResult", "Image", "BaseImage", "Sandbox", "Resources", "NetworkAccess",
    "PortSpecs", "PortSpec", "SandboxTag", "StringMap", "SecretSource",
    "CommandRouterAccess", "SandboxHandleMetadata", "SandboxInfo", "TaskInfo", "TaskLogs",
    "EnvironmentMetadata", "EnvironmentSettings", "RPCStatus", "RPCRetryPolicy",
]
TCR_EXTRA = []

SCALARS = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64",
    7: "fixed32", 8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32",
    16: "sfixed64", 17: "sint32", 18: "sint64",
}
F = descriptor_pb2.FieldDescriptorProto


def file_proto(module):
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    return proto


def main():
    api, tcr = file_proto(api_pb2), file_proto(task_command_router_pb2)
    target = sys.argv[1]
    kept_files = []
    for proto, methods, extra in ((api, API_METHODS, API_EXTRA), (tcr, TCR_METHODS, TCR_EXTRA)):
        service = proto.service[0]
        by_name = {m.name: m for m in service.method}
        missing = [m for m in methods if m not in by_name]
        if missing:
            sys.exit(f"not in {proto.name}: {missing}")
        chosen = [by_name[m] for m in methods]
        names = set(extra)
        for m in chosen:
            for t in (m.input_type, m.output_type):
                if t.startswith(f".{proto.package}."):
                    names.add(t[len(proto.package) + 2:])
        kept_files.append((proto, service, chosen, names))
    kept = set()
    for proto, _, _, names in kept_files:
        kept |= {f".{proto.package}.{n}" for n in names}
    kept |= {".google.protobuf.Empty", ".google.protobuf.Any"}
    # enums used by kept fields, found while printing
    for proto, service, chosen, names in kept_files:
        enums = {}
        collect_enums(proto, kept, enums)
        text = []
        for message in proto.message_type:
            if message.name in names:
                text.append(print_message(message, f".{proto.package}.{message.name}", kept, proto, ""))
        for enum in proto.enum_type:
            if f".{proto.package}.{enum.name}" in enums:
                text.append(print_enum(enum, ""))
        svc = [f"service {service.name} {{"]
        for m in chosen:
            cs = "stream " if m.client_streaming else ""
            ss = "stream " if m.server_streaming else ""
            svc.append(f"  rpc {m.name}({cs}{m.input_type.lstrip('.')}) returns ({ss}{m.output_type.lstrip('.')});")
        svc.append("}")
        imports = [f'import "{d}";' for d in proto.dependency
                   if d in ("google/protobuf/empty.proto", "modal_proto/api.proto")
                   or (d == "google/protobuf/any.proto" and proto.name.endswith("api.proto"))]
        with open(f"{target}/{proto.name.split('/')[-1]}", "w") as out:
            out.write(HEADER.format(version=modal_version.__version__, name=proto.name))
            out.write('syntax = "proto3";\n\n' + f"package {proto.package};\n\n")
            out.write("\n".join(imports) + "\n\n")
            out.write("\n".join(text) + "\n" + "\n".join(svc) + "\n")


def collect_enums(proto, kept, enums):
    def walk(message, path):
        if path not in kept:
            return
        for field in message.field:
            if field.type == F.TYPE_ENUM:
                enums[field.type_name] = True
        for nested in message.nested_type:
            walk(nested, f"{path}.{nested.name}")
    for message in proto.message_type:
        walk(message, f".{proto.package}.{message.name}")


def field_kept(field, kept, nested_names):
    if field.type in SCALARS or field.type == F.TYPE_ENUM:
        return True
    return field.type_name in kept or field.type_name in nested_names


def print_message(message, path, kept, proto, indent):
    nested_names = set()
    maps = {}
    for nested in message.nested_type:
        if nested.options.map_entry:
            maps[f"{path}.{nested.name}"] = nested
            nested_names.add(f"{path}.{nested.name}")
    lines = [f"{indent}message {message.name} {{"]
    oneofs = {}
    for field in message.field:
        if field.HasField("oneof_index") and not field.proto3_optional:
            oneofs.setdefault(field.oneof_index, []).append(field)
    printed_oneofs = set()
    for field in message.field:
        if not field_kept(field, kept, nested_names):
            continue
        if field.type_name in maps:
            entry = maps[field.type_name]
            k, v = entry.field[0], entry.field[1]
            if not field_kept(v, kept, set()):
                continue
            lines.append(f"{indent}  map<{type_of(k)}, {type_of(v)}> {field.name} = {field.number};")
            continue
        if field.HasField("oneof_index") and not field.proto3_optional:
            index = field.oneof_index
            if index in printed_oneofs:
                continue
            printed_oneofs.add(index)
            members = [f for f in oneofs[index] if field_kept(f, kept, nested_names)]
            lines.append(f"{indent}  oneof {message.oneof_decl[index].name} {{")
            for f in members:
                lines.append(f"{indent}    {type_of(f)} {f.name} = {f.number};")
            lines.append(f"{indent}  }}")
            continue
        label = ""
        if field.label == F.LABEL_REPEATED:
            label = "repeated "
        elif field.proto3_optional:
            label = "optional "
        lines.append(f"{indent}  {label}{type_of(field)} {field.name} = {field.number};")
    for nested in message.nested_type:
        if nested.options.map_entry:
            continue
        npath = f"{path}.{nested.name}"
        if npath in kept:
            lines.append(print_message(nested, npath, kept, proto, indent + "  "))
    for enum in message.enum_type:
        lines.append(print_enum(enum, indent + "  "))
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def print_enum(enum, indent):
    lines = [f"{indent}enum {enum.name} {{"]
    for value in enum.value:
        lines.append(f"{indent}  {value.name} = {value.number};")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def type_of(field):
    if field.type in SCALARS:
        return SCALARS[field.type]
    return field.type_name


HEADER = """\
// {name}, as generated by modal-proto/extract.py from the descriptors
// embedded in the `modal` wheel {version} from PyPI. Copyright Modal Labs, Inc.,
// Apache License 2.0 (https://www.apache.org/licenses/LICENSE-2.0); modified:
// only the RPCs and messages caduceus uses are kept, and kept messages lose
// the fields whose types were not kept. Modal says direct gRPC use has no
// compatibility guarantees; this is the surface the stand-in was checked
// against with that SDK version.
"""

if __name__ == "__main__":
    main()
