#!/usr/bin/env python3
"""The loops of each kernel function in sm_90a SASS, and what their instructions are.

A loop is the range from a backward branch's target to the branch. For each kernel function (or
those whose name contains NAME_PART) it prints one line per loop of at least MIN instructions:
its address range, its instruction count and the most frequent opcodes (modifiers dropped,
predicates ignored), e.g.

  0x11f0-0x45b0  829  R2UR:80 VIADD:73 FSEL:64 UMOV:61 UIADD3:55 ISETP:52 IMAD:50 HGMMA:48 ...

Nested loops are listed separately (an outer loop's count includes its inner loops). The hot loop
is usually the one with the HGMMAs and the fewest instructions around them. Used to compare two
builds of a kernel before spending a GPU run (WORKLOG: K7's eighth pass, bwd_sm90 session 43):
descriptor arithmetic in ordinary registers shows as R2UR, spills as LDL / STL.

  cuobjdump -sass build/libhfa.so > sass.txt     (cuobjdump: the CUDA toolkit, or the PyPI wheel
  scripts/sass_loops.py sass.txt [NAME_PART] [--min N] [--top K]          nvidia-cuda-cuobjdump)
  scripts/sass_loops.py --self-test
"""
import argparse
import collections
import re
import sys

FUNCTION = re.compile(r"Function : (\S+)")
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)([^;]*);")
BRANCH_TARGET = re.compile(r"0x([0-9a-f]+)")


def functions(lines):
    """(name, [(address, opcode, operands)]) for each function of a cuobjdump -sass listing."""
    name, body = None, []
    for line in lines:
        m = FUNCTION.search(line)
        if m:
            if name is not None:
                yield name, body
            name, body = m.group(1), []
            continue
        m = INSTRUCTION.search(line)
        if m and name is not None:
            body.append((int(m.group(1), 16), m.group(3), m.group(4)))
    if name is not None:
        yield name, body


def loops(body, min_instructions=1):
    """(first address, branch address, count, Counter of opcodes) for each backward branch."""
    out = []
    for address, opcode, operands in body:
        if not opcode.startswith("BRA"):
            continue
        m = BRANCH_TARGET.search(operands)
        if not m or int(m.group(1), 16) > address:
            continue
        start = int(m.group(1), 16)
        inside = [op.split(".")[0] for a, op, _ in body if start <= a <= address]
        if len(inside) >= min_instructions:
            out.append((start, address, len(inside), collections.Counter(inside)))
    return out


def report(lines, name_part="", min_instructions=100, top=25):
    text = []
    for name, body in functions(lines):
        if name_part not in name:
            continue
        found = loops(body, min_instructions)
        if not found:
            continue
        text.append("== " + name)
        for start, end, count, ops in found:
            mix = " ".join(f"{op}:{n}" for op, n in ops.most_common(top))
            text.append(f"  {start:#x}-{end:#x}  {count}  {mix}")
    return text


def self_test():
    listing = """
        Function : kernel_a
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   HGMMA.64x128x16.F32 R24, gdesc[UR4], R24 ;
        /*0020*/                   R2UR UR4, R2 ;
        /*0030*/               @P0 BRA 0x10 ;
        /*0040*/                   BRA 0x50 ;
        /*0050*/                   EXIT ;
        Function : kernel_b
        /*0000*/                   EXIT ;
    """.splitlines()
    got = report(listing, min_instructions=1)
    want = ["== kernel_a", "  0x10-0x30  3  HGMMA:1 R2UR:1 BRA:1"]
    assert got == want, got
    assert report(listing, name_part="kernel_b", min_instructions=1) == [], "a function without loops prints nothing"
    assert report(listing, min_instructions=4) == [], "--min drops shorter loops"
    print("sass_loops.py: self-test passed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sass", nargs="?", help="cuobjdump -sass output")
    ap.add_argument("name_part", nargs="?", default="", help="only functions whose name contains this")
    ap.add_argument("--min", type=int, default=100, help="smallest loop shown, in instructions (default 100)")
    ap.add_argument("--top", type=int, default=25, help="opcodes shown per loop (default 25)")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        self_test()
        return
    if not args.sass:
        ap.error("a SASS listing is needed (or --self-test)")
    with open(args.sass) as f:
        print("\n".join(report(f.read().splitlines(), args.name_part, args.min, args.top)))


if __name__ == "__main__":
    sys.exit(main())
