"""CTAs per SM the driver will keep resident for tilec kernels on this GPU: for each kernel
metadata file given, its cubin loaded through tilec_torch's driver layer (cuda-python), its
dynamic shared memory opted in as the runtime does, then cuOccupancyMaxActiveBlocksPerMultiprocessor
at the metadata's block size and dynamic shared memory, with the cubin's register count
(cuFuncGetAttribute NUM_REGS). `scripts/h200-ab.sh` prints it per artifact set, so a residency
change (`ctas_per_sm`) is seen on the GPU, not only in ptxas's report.

Usage: python3 scripts/h200_occupancy.py LABEL META.json [META.json ...]
"""
import sys

import torch  # creates the primary context the driver calls below run in

from tilec_torch import driver
from tilec_torch.meta import load_kernel_meta

CU_FUNC_ATTRIBUTE_NUM_REGS = 4


def main(label, paths):
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    drv = driver._import_driver()
    for path in paths:
        meta = load_kernel_meta(path)
        with open(meta.cubin_path, "rb") as f:
            mod = driver.Module(meta, f.read(), is_ptx=False)
        ctas = driver._check(drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(mod.function, meta.block_threads, meta.dynamic_smem_bytes), "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        regs = driver._check(drv.cuFuncGetAttribute(drv.CUfunction_attribute(CU_FUNC_ATTRIBUTE_NUM_REGS), mod.function), "cuFuncGetAttribute(NUM_REGS)")
        print(f"occupancy {label} {meta.kernel}: {ctas} CTAs per SM ({meta.block_threads} threads, {meta.dynamic_smem_bytes} B dynamic shared memory, {regs} registers)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
