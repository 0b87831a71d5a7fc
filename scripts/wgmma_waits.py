#!/usr/bin/env python3
"""Where each kernel's WGMMA waits sit among its softmax instructions, from sm_90a SASS.

ptxas schedules a WARPGROUP.DEPBAR (cute::warpgroup_wait) as early as nothing orders it, which
can put a wait meant to come after the softmax ahead of it (WORKLOG, K7 fifth pass). This prints,
per kernel function, its instructions of interest in order, runs of the same kind counted:

  G   WGMMA issue (HGMMA / QGMMA)        W0, W1   WARPGROUP.DEPBAR.LE gsb0, N (wait<N>)
  m   FMNMX (row max)                    X        MUFU.EX2 (exponential)
  c   F2FP (conversion to the next operand)       B   BAR.SYNC / BAR.ARV (named barriers)

e.g. "B G10 B W1 m72 X ... W0 c32": S and P V issued in one turn, the wait for S, the row max,
the exponentials, then the wait for P V (after the max: the softmax overlaps P V).

  cuobjdump -sass build/libhfa.so > sass.txt     (cuobjdump: the CUDA toolkit, or the PyPI wheel
  scripts/wgmma_waits.py sass.txt [NAME_PART]     nvidia-cuda-cuobjdump)
  scripts/wgmma_waits.py --self-test
"""
import re
import sys

INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)([^;]*);")


def marker(opcode, operands):
    """The one-letter kind of an instruction, or None for the ones not shown."""
    if opcode.startswith("WARPGROUP.DEPBAR"):
        return "W" + str(int(operands.strip().split()[-1], 0))
    if opcode.startswith(("HGMMA", "QGMMA")):
        return "G"
    if opcode.startswith("MUFU.EX2"):
        return "X"
    if opcode.startswith("FMNMX"):
        return "m"
    if opcode.startswith("F2FP"):
        return "c"
    if opcode.startswith(("BAR.SYNC", "BAR.ARV")):
        return "B"
    return None


def compress(kinds):
    """['m', 'm', 'X'] -> 'm2 X'."""
    out = []
    for k in kinds:
        if out and out[-1][0] == k:
            out[-1][1] += 1
        else:
            out.append([k, 1])
    return " ".join(k if n == 1 else f"{k}{n}" for k, n in out)


def functions(sass):
    """(name, [kinds]) per kernel function of a cuobjdump -sass listing."""
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name, body = part.split("\n", 1)
        kinds = []
        for m in INSTRUCTION.finditer(body):
            k = marker(m.group(2), m.group(3))
            if k:
                kinds.append(k)
        yield name.strip(), kinds


def self_test():
    listing = """
        Function : kernel_a
        /*0010*/                   BAR.SYNC.DEFER_BLOCKING R15, 0x100 ;
        /*0020*/                   QGMMA.64x192x32.F32.E4M3.E4M3 R24, gdesc[UR16], RZ, !UPT ;
        /*0030*/                   QGMMA.64x192x32.F32.E4M3.E4M3 R24, gdesc[UR16], R24, gsb0 ;
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0050*/                   FMNMX R16, R24, R213, !PT ;
        /*0060*/                   FMNMX R17, R16, R25, !PT ;
        /*0070*/                   MUFU.EX2 R64, R64 ;
        /*0080*/              @!P0 WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0090*/                   F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C R14, R11, R134, RZ ;
        Function : kernel_b
        /*0010*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT, gsb0 ;
        /*0020*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
    """
    got = [(n, compress(k)) for n, k in functions(listing)]
    want = [("kernel_a", "B G2 W1 m2 X W0 c"), ("kernel_b", "G W0")]
    if got != want:
        sys.exit(f"wgmma_waits self-test: got {got}, want {want}")
    print("wgmma_waits self-test: ok")


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    with open(argv[1]) as f:
        sass = f.read()
    for name, kinds in functions(sass):
        if len(argv) == 3 and argv[2] not in name:
            continue
        if any(k == "G" for k in kinds):
            print(f"== {name}\n{compress(kinds)}")


if __name__ == "__main__":
    main(sys.argv)
