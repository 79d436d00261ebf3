"""The GPU catalog's new rows: names as NVML/DCGM (NVIDIA) or amd-smi (AMD) report them find their
own row and no other (the catalog is ordered from specific to general), and every row's figures are
consistent."""
from __future__ import annotations

import pytest

from kbopt.kb.catalog import gpus, match_gpu

NAMES = {
    "NVIDIA RTX A4000": "RTX-A4000", "NVIDIA RTX A5000": "RTX-A5000", "NVIDIA RTX A6000": "RTX-A6000",
    "NVIDIA GeForce RTX 4090": "RTX-4090", "NVIDIA H20": "H20", "NVIDIA L20": "L20",
    "NVIDIA GB200": "GB200", "NVIDIA B200": "B200",
    "NVIDIA GeForce RTX 5090": "RTX-5090",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": "RTX-PRO-6000-Blackwell",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "RTX-PRO-6000-Blackwell",
    "NVIDIA RTX 6000 Ada Generation": "RTX-6000-Ada", "NVIDIA L40": "L40", "NVIDIA A30": "A30", "NVIDIA A40": "A40",
    # amd-smi's market name, rocm-smi's card series, and a VM's virtual function:
    "AMD Instinct MI300X": "MI300X", "AMD INSTINCT MI300X (MCM) OAM AC MBA": "MI300X", "AMD Instinct MI300X VF": "MI300X",
    "AMD Instinct MI325X": "MI325X", "AMD Instinct MI355X": "MI355X", "AMD Instinct MI350X": "MI350X",
    # Rows that must still win over the new ones, and names that must not fall into them:
    "NVIDIA H200": "H200", "NVIDIA H100 80GB HBM3": "H100-SXM", "NVIDIA L40S": "L40S", "NVIDIA L4": "L4",
    "NVIDIA A10": "A10", "NVIDIA GH200 480GB": "GH200", "NVIDIA A100-SXM4-80GB": "A100-80GB",
}
# Other products, each near a row's name: none may borrow a row (their figures differ).
NOT_IN_CATALOG = ["NVIDIA GeForce RTX 4090 D", "NVIDIA RTX A2000", "NVIDIA GeForce RTX 5090 D",
                  "NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA GeForce RTX 5090 Laptop GPU",
                  "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "Quadro RTX 6000",
                  "NVIDIA H800", "NVIDIA A800-SXM4-80GB", "NVIDIA B300", "AMD Instinct MI300A", "AMD Instinct MI250X",
                  "AMD Instinct MI308X"]


def test_names_find_their_own_row():
    assert {name: match_gpu(name).id for name in NAMES} == NAMES


@pytest.mark.parametrize("name", NOT_IN_CATALOG)
def test_other_products_do_not_borrow_a_row(name):
    assert match_gpu(name) is None, name


def test_every_row_has_a_source_and_dense_figures():
    for gpu in gpus():
        assert gpu.source, gpu.id
        assert gpu.memory_gib > 0 and gpu.bandwidth_gbps > 0 and gpu.fp16_tflops > 0, gpu.id
        # FP8 (where there are FP8 tensor cores) runs at twice FP16's dense rate (L40S's datasheet rounds: 362 and 733); none without them.
        assert gpu.fp8_tflops == (pytest.approx(2 * gpu.fp16_tflops, rel=0.02) if gpu.fp8_tensor_cores else 0), gpu.id
        # FP4 where there are FP4 tensor cores (NVFP4; MXFP4 on AMD CDNA 4), at least FP8's rate; none without.
        assert (gpu.fp4_tflops >= gpu.fp8_tflops) if gpu.fp4_tensor_cores else gpu.fp4_tflops == 0, gpu.id
        # A CUDA compute capability on every NVIDIA row and none on an AMD one.
        assert (gpu.compute_capability is None) == (gpu.vendor == "amd"), gpu.id


def test_blackwell_rows_have_fp4_and_geforce_rates_are_the_fp32_accumulate_ones():
    rtx5090, pro6000 = match_gpu("NVIDIA GeForce RTX 5090"), match_gpu("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    assert (rtx5090.compute_capability, pro6000.compute_capability) == ("12.0", "12.0")
    assert rtx5090.fp4_tensor_cores and pro6000.fp4_tensor_cores
    # GeForce: FP16 at half the FP16-accumulate 419 TFLOPS; INT8 and FP4 at full rate (3,352 sparse / 2).
    assert (rtx5090.fp16_tflops, rtx5090.int8_tops, rtx5090.fp4_tflops) == (209.5, 838, 1676)
    # The professional part runs FP32 accumulate at full rate: FP4 = 2 x FP8 = 4 x FP16.
    assert pro6000.fp4_tflops == pytest.approx(4 * pro6000.fp16_tflops)


def test_amd_rows_follow_from_compute_units_and_clock():
    """AMD's dense peaks are CUs x clock x FLOPs per CU per clock: the catalog's figures agree."""
    fp8 = {"MI300X": 304 * 2.1e9 * 4096, "MI325X": 304 * 2.1e9 * 4096, "MI355X": 256 * 2.4e9 * 8192, "MI350X": 256 * 2.2e9 * 8192}
    for gpu_id, flops in fp8.items():
        gpu = next(g for g in gpus() if g.id == gpu_id)
        assert gpu.vendor == "amd" and gpu.fp8_tensor_cores
        assert gpu.fp8_tflops == pytest.approx(flops / 1e12, abs=0.1), gpu_id
        assert gpu.fp4_tensor_cores == gpu_id.startswith("MI35")           # MXFP4 from CDNA 4
