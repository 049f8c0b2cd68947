#!/usr/bin/env python3
"""The static gate on the CUDA kernels, from the build's ptxas reports (ptxas -v
output, one file per .cu): prints registers, shared memory, spills and resident
blocks per SM (sm_90: 64 K registers, 228 KB shared memory, 2048 threads, 32
blocks) for every kernel, and fails when a kernel spills (beyond the known
debts listed below, each of which must still be there), a hot kernel falls
below the occupancy stated for it, or ptxas reports a potential performance
loss (C7514 and kin: it serialised a kernel's wgmma, which keeps the kernel
correct and makes it several times slower, so nothing else would catch it).

Usage: kernel_resources.py REPORT..."""
import re
import subprocess
import sys

# (name pattern, threads per block, dynamic shared memory at GLM-4-9B decode
# shapes, least resident blocks per SM we state for it; 0 = not hot).
KERNELS = [
    (r"QuantLinearKernel<\(QuantCode\)\d, 1,", 128, 0, 5),  # quantized decode at batch 1
    (r"QuantLinearKernel<\(QuantCode\)\d, 8,", 128, 0, 3),  # quantized decode, 8 rows of x a block
    (r"GemvKernel<", 128, 4 * 13696, 4),         # decode GEMV at batch 1; x staged as fp32 (down_proj: K = 13696)
    # decode batches 2..64 fed through shared memory: 5 cp.async stages of 144-byte rows (64 weight
    # rows, 8 kNT of x, norm_w's), 4 at 64 rows; 8 KB of weights a stage in flight needs 3+ blocks
    (r"StagedSkinnyKernel<1,", 128, 5 * 73 * 144, 4),
    (r"StagedSkinnyKernel<2,", 128, 5 * 81 * 144, 3),
    (r"StagedSkinnyKernel<4,", 128, 5 * 97 * 144, 3),
    (r"StagedSkinnyKernel<8,", 128, 4 * 129 * 144, 3),
    (r"SkinnyKernel<[124],", 128, 0, 4),          # decode batches 2..32: weight streaming, tile in static smem
    (r"SkinnyKernel<8,", 128, 0, 4),              # batches 33..64: within 128 registers, one wave (issue 19)
    # prefill on Hopper, 256-wide tiles: 4 TMA stages of 48 KB (x's box and two of W), 128 accumulators a consumer thread
    (r"WgmmaGemmKernel<\(Epilogue\)\d, 256>", 384, 1024 + 4 * 49152 + 64, 1),
    # 192-wide tiles: 5 stages of 40 KB (x's box and three 64-row boxes of W), 96 accumulators a consumer thread
    (r"WgmmaGemmKernel<\(Epilogue\)\d, 192>", 384, 1024 + 5 * 40960 + 80, 1),
    (r"WgmmaGemmKernel<", 384, 1024 + 5 * 32768 + 80, 1),  # prefill on Hopper: 5 TMA stages of 32 KB, one block a SM
    # quantized prefill on Hopper (quant_gemm_layout.h): x, bf16 and codes tiles a stage, three barriers,
    # 6 stages at int4 (36 KB), 5 at 8 bits (40 KB), 6 for bf16 rows (32 KB); one block a SM
    (r"QuantGemmKernel<\(QuantCode\)0,", 512, 1024 + 6 * (36864 + 24), 1),
    (r"QuantGemmKernel<\(QuantCode\)[12],", 512, 1024 + 5 * (40960 + 24), 1),
    (r"QuantGemmKernel<\(QuantCode\)3,", 512, 1024 + 6 * (32768 + 24), 1),
    # W8A8 prefill on Hopper: x's and W's 8-bit codes, 5 TMA stages of 32 KB (128-code k-tiles); one block a SM
    (r"W8A8GemmKernel<", 384, 1024 + 5 * 32768 + 80, 1),
    (r"(?<!Wgmma)(?<!W8A8)GemmKernel<", 256, 4 * 20480, 2),  # prefill elsewhere: 4-stage pipeline in 80 KB of dynamic smem
    # decode attention: K/V double buffer (2 x 2 x 32 x (128 + 8) bf16) plus q (4 x heads-per-warp x 128 fp32)
    (r"AttentionSliceKernel<1, \(KvCode\)0>", 128, 34816 + 2048, 4),
    (r"AttentionSliceKernel<2, \(KvCode\)0>", 128, 34816 + 4096, 4),
    (r"AttentionSliceKernel<4, \(KvCode\)0>", 128, 34816 + 8192, 4),
    (r"AttentionSliceKernel<8, \(KvCode\)0>", 128, 34816 + 16384, 2),  # prefill rows: big head groups per block
    # over an 8-bit cache: codes (2 x 2 x 32 x (128 + 16) bytes) and the tiles' scales (2 x 2 x 32 fp32)
    (r"AttentionSliceKernel<[124], \(KvCode\)[12]>", 128, 18944 + 8192, 4),
    (r"AttentionSliceKernel<8, \(KvCode\)[12]>", 128, 18944 + 16384, 2),
    # prefill attention on tensor cores: Q, then two stages of K and V, (64 + 4 x 64) x (128 + 8) bf16
    (r"FlashKernel<128,", 128, 87040, 2),
    (r"FlashKernel<64,", 128, 46080, 2),
    # the vision program's attention on wgmma: two consumer warpgroups and a producer one (setmaxnreg:
    # 168 registers a thread at launch); Q's two tiles and four stages of K and of V, [64][128] bf16 each
    (r"WgmmaFlashSegmentKernel", 384, 1024 + 10 * 16384 + 136, 1),
    (r"CombineKernel\(", 128, 0, 8),
    (r"RmsNormKernel<", 256, 4 * 4096, 4),
    (r"ArgmaxKernel\(", 1024, 0, 1),
    (r"SampleRowsKernel\(", 1024, 0, 1),
    (r"EmbeddingKernel\(", 128, 0, 8),
    (r"OneShotAllReduceKernel<", 256, 4 * 4096, 1),  # tp > 1: at most 64 blocks, each must be resident
    (r"", 256, 0, 0),                          # elementwise and the rest: 256 threads, not hot
]

# Spills that are known and owed: they must shrink, never grow. None today: the
# build compiles with ptxas --warning-as-error, so a new spill fails the build too.
KNOWN_SPILLS = {}

SM_REGS, SM_SMEM, SM_THREADS, SM_BLOCKS, SMEM_RESERVED = 65536, 233472, 2048, 32, 1024


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return [re.sub(r"ag::cuda::|\(anonymous namespace\)::", "", n) for n in out[:len(names)]]


def short_name(name):
    """'void GemmKernel<(Epilogue)0>(LinearParams, ...)' -> 'GemmKernel<(Epilogue)0>'."""
    name = re.sub(r"^void ", "", name)
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0 and name[i] == "(":
            return name[:i]
    return name


def parse(text):
    entries = []
    for block in re.split(r"ptxas info\s+: Compiling entry function ", text)[1:]:
        name = re.match(r"'(\S+)'", block).group(1)
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", block)
        used = re.search(r"Used (\d+) registers", block)
        smem = re.search(r"(\d+) bytes smem", block)
        entries.append((name, int(used.group(1)), int(smem.group(1)) if smem else 0,
                        int(spill.group(1)) + int(spill.group(2))))
    return entries


def performance_losses(text):
    """(mangled kernel, what ptxas says) for each 'Potential Performance Loss' advisory."""
    text = re.sub(r"\s+", " ", text)
    return [(m.group(2), m.group(1).strip()) for m in
            re.finditer(r"Potential Performance Loss: (.*?) in the function '(\S+)'", text)]


def blocks_per_sm(regs, threads, smem):
    warps = (threads + 31) // 32
    regs_per_warp = (regs * 32 + 255) // 256 * 256
    by_regs = SM_REGS // (regs_per_warp * warps) if regs else SM_BLOCKS
    by_smem = SM_SMEM // (smem + SMEM_RESERVED)
    return min(by_regs, by_smem, SM_THREADS // threads, SM_BLOCKS)


def main(reports):
    texts = [open(r).read() for r in reports]
    entries = [e for t in texts for e in parse(t)]
    if not entries:
        print("no kernels in the ptxas reports")
        return 1
    names = demangle([e[0] for e in entries])
    failures = []
    seen_spills = {}
    print(f"{'kernel':64} {'regs':>4} {'smem':>7} {'spill':>5} {'blocks/SM':>9} {'stated':>6}")
    for (_, regs, static_smem, spill), name in sorted(zip(entries, names), key=lambda x: x[1]):
        short = short_name(name)
        pattern, threads, dynamic, stated = next(k for k in KERNELS if re.search(k[0], name))
        blocks = blocks_per_sm(regs, threads, static_smem + dynamic)
        print(f"{short[:64]:64} {regs:>4} {static_smem + dynamic:>7} {spill:>5} {blocks:>9} {stated:>6}")
        if spill:
            seen_spills[short] = max(seen_spills.get(short, 0), spill)
            if spill > KNOWN_SPILLS.get(short, 0):
                failures.append(f"{short} spills {spill} bytes")
        if blocks < stated:
            failures.append(f"{short}: {blocks} blocks per SM, below the stated {stated}")
    losses = [loss for t in texts for loss in performance_losses(t)]
    for (_, what), name in zip(losses, demangle([l[0] for l in losses])):
        failures.append(f"{short_name(name)}: ptxas: {what}")
    for known, limit in KNOWN_SPILLS.items():
        if known not in seen_spills:
            failures.append(f"{known} no longer spills: remove it from KNOWN_SPILLS")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(entries)} kernels, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
