#!/usr/bin/env python3
"""Copies a GGUF file with RoPE scaling written into its metadata, so that a model can be run
beyond its trained context by every engine that reads the file (longserve's GGUF loader and
llama.cpp both read `<arch>.rope.scaling.*` and `<arch>.context_length`).

  python3 scripts/eval/gguf_rope_scaling.py --in SmolLM2-135M-Instruct.Q4_1.gguf \
      --out /tmp/smollm2-yarn2.gguf --type yarn --factor 2

writes `rope.scaling.type`, `rope.scaling.factor`, `rope.scaling.original_context_length` (the
file's context_length) and `context_length` = original x factor; tensors are copied unchanged.
Needs gguf-py (tests/requirements.txt pins it).
"""
from __future__ import annotations

import argparse
import sys

import gguf
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata, get_field_data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--in", dest="src", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--type", default="yarn", choices=["linear", "yarn"])
    ap.add_argument("--factor", type=float, default=2.0)
    args = ap.parse_args()
    if args.factor <= 1.0:
        ap.error("--factor must be > 1")

    reader = gguf.GGUFReader(args.src, "r")
    arch = get_field_data(reader, gguf.Keys.General.ARCHITECTURE)
    ctx_key = gguf.Keys.LLM.CONTEXT_LENGTH.format(arch=arch)
    orig = get_field_data(reader, ctx_key)
    if orig is None:
        print(f"{args.src}: no {ctx_key}", file=sys.stderr)
        return 1
    if get_field_data(reader, gguf.Keys.Rope.SCALING_TYPE.format(arch=arch)) not in (None, "none"):
        print(f"{args.src}: already has RoPE scaling", file=sys.stderr)
        return 1
    u32, f32, s = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.STRING
    new = {
        ctx_key: MetadataDetails(u32, int(orig * args.factor)),
        gguf.Keys.Rope.SCALING_TYPE.format(arch=arch): MetadataDetails(s, args.type),
        gguf.Keys.Rope.SCALING_FACTOR.format(arch=arch): MetadataDetails(f32, args.factor),
        gguf.Keys.Rope.SCALING_ORIG_CTX_LEN.format(arch=arch): MetadataDetails(u32, int(orig)),
    }
    writer = gguf.GGUFWriter(args.out, arch=arch, endianess=reader.endianess)
    alignment = get_field_data(reader, gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = alignment
    copy_with_new_metadata(reader, writer, new, [])
    print(f"{args.out}: {arch}, context {orig} -> {int(orig * args.factor)}, "
          f"rope scaling {args.type} x{args.factor:g}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
