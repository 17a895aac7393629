"""What OpenVINO really runs an artifact's weighted layers in on this CPU class: counts of (layer type,
runtime precision, kernel) from the compiled model's runtime graph.

    ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python scripts/openvino_runtime_precisions.py models/ssd300-synth-int8/1

``ONEDNN_MAX_CPU_ISA`` (AVX2, AVX512_CORE_VNNI, AVX512_CORE_BF16, AVX512_CORE_AMX: `contract.cpu_classes`)
picks the class to reproduce. A convolution reading ``u8`` activations runs OpenVINO's INT8 kernels on
unsigned inputs, ``i8`` on signed ones (AMX only); ``f32``/``bf16`` is floating point. The model is compiled
as the service's backend compiles it (batch 1, the manifest's precision for its unquantized layers).
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

from contract.cpu_classes import cpu_flags, effective_class
from contract.manifest import Manifest
from service.runtime.backends.machine import openvino_core, openvino_cpu_capabilities
from service.runtime.backends.openvino_backend import hint_for_cpu, read_with_batch_size

WEIGHTED = ("Convolution", "GroupConvolution", "Deconvolution", "MatMul", "FullyConnected")


def runtime_precisions(artifact: Path) -> collections.Counter[tuple[str, str, str]]:
    manifest = Manifest.read(artifact)
    core = openvino_core()
    model = read_with_batch_size(core, artifact / manifest.file, 1)
    hint = hint_for_cpu(manifest, "manifest", list(openvino_cpu_capabilities()))
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": hint})
    counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        layer = info["layerType"].astype(str)
        if layer in WEIGHTED:
            counts[(layer, info["runtimePrecision"].astype(str), info["primitiveType"].astype(str))] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("artifacts", nargs="+", type=Path)
    args = parser.parse_args()
    for artifact in args.artifacts:
        print(f"{artifact} as CPU class {effective_class(cpu_flags())}:")
        for (layer, precision, kernel), count in sorted(runtime_precisions(artifact).items()):
            print(f"  {count:4d}  {layer:18s} {precision:5s} {kernel}")


if __name__ == "__main__":
    main()
