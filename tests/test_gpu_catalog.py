"""The GPU catalog's new rows: names as NVML/DCGM report them find their own row and no other
(the catalog is ordered from specific to general), and every row's figures are consistent."""
from __future__ import annotations

import pytest

from kbopt.kb.catalog import gpus, match_gpu

NAMES = {
    "NVIDIA RTX A4000": "RTX-A4000", "NVIDIA RTX A5000": "RTX-A5000", "NVIDIA RTX A6000": "RTX-A6000",
    "NVIDIA GeForce RTX 4090": "RTX-4090", "NVIDIA H20": "H20", "NVIDIA L20": "L20",
    "NVIDIA GB200": "GB200", "NVIDIA B200": "B200",
    # Rows that must still win over the new ones, and names that must not fall into them:
    "NVIDIA H200": "H200", "NVIDIA H100 80GB HBM3": "H100-SXM", "NVIDIA L40S": "L40S", "NVIDIA L4": "L4",
    "NVIDIA A10": "A10", "NVIDIA GH200 480GB": "GH200",
}
NOT_IN_CATALOG = ["NVIDIA RTX 6000 Ada Generation", "NVIDIA GeForce RTX 4090 D", "NVIDIA RTX A2000", "NVIDIA L40"]


def test_names_find_their_own_row():
    assert {name: match_gpu(name).id for name in NAMES} == NAMES


@pytest.mark.parametrize("name", NOT_IN_CATALOG)
def test_other_products_do_not_borrow_a_row(name):
    gpu = match_gpu(name)
    assert gpu is None or gpu.id not in {"RTX-A6000", "RTX-4090", "L20", "H20", "L4", "L40S"}, (name, gpu)


def test_every_row_has_a_source_and_dense_figures():
    for gpu in gpus():
        assert gpu.source, gpu.id
        assert gpu.memory_gib > 0 and gpu.bandwidth_gbps > 0 and gpu.fp16_tflops > 0, gpu.id
        # FP8 (where there are FP8 tensor cores) runs at twice FP16's dense rate (L40S's datasheet rounds: 362 and 733); none without them.
        assert gpu.fp8_tflops == (pytest.approx(2 * gpu.fp16_tflops, rel=0.02) if gpu.fp8_tensor_cores else 0), gpu.id
