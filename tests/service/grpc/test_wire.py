"""The server's messages against the protocol as tritonclient.grpc has it: every method the server
registers is one of ``inference.GRPCInferenceService``'s with the same request and response messages, and
every field the server's messages declare has the protocol's number, type and cardinality (so the bytes
on the wire mean the same on both sides)."""

from __future__ import annotations

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor
from tritonclient.grpc import service_pb2

from service.grpc.auth import INFERENCE_SERVICE
from service.grpc.servicer import METHODS


def field_protos(message: Descriptor) -> dict[str, descriptor_pb2.FieldDescriptorProto]:
    proto = descriptor_pb2.DescriptorProto()
    message.CopyToProto(proto)
    return {field.name: field for field in proto.field}


def assert_same_fields(ours: Descriptor, theirs: Descriptor, seen: set[str]) -> None:
    if ours.full_name in seen:
        return
    seen.add(ours.full_name)
    reference_fields = field_protos(theirs)
    for name, field in field_protos(ours).items():
        where = f"{ours.full_name}.{name}"
        reference = reference_fields.get(name)
        assert reference is not None, f"{where}: not in {theirs.full_name}"
        assert (field.number, field.type, field.label) == (
            reference.number,
            reference.type,
            reference.label,
        ), where
        assert field.HasField("oneof_index") == reference.HasField("oneof_index"), where
        ours_field, their_field = ours.fields_by_name[name], theirs.fields_by_name[name]
        if ours_field.message_type is not None:
            assert_same_fields(ours_field.message_type, their_field.message_type, seen)
        if ours_field.enum_type is not None:
            ours_values = {v.name: v.number for v in ours_field.enum_type.values}
            theirs_values = {v.name: v.number for v in their_field.enum_type.values}
            assert ours_values.items() <= theirs_values.items(), where


def test_methods_and_messages_match_the_protocol() -> None:
    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert service.full_name == INFERENCE_SERVICE
    seen: set[str] = set()
    for name, (request, response) in METHODS.items():
        method = service.methods_by_name[name]
        assert request.DESCRIPTOR.name == method.input_type.name
        assert response.DESCRIPTOR.name == method.output_type.name
        assert_same_fields(request.DESCRIPTOR, method.input_type, seen)
        assert_same_fields(response.DESCRIPTOR, method.output_type, seen)
    assert "detect.oip.ModelConfig" in seen and "detect.oip.InferTensorContents" in seen
