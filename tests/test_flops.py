"""FLOP estimates of single OpenVINO ops against hand counts."""

from __future__ import annotations

import numpy as np
import openvino.opset13 as ops

from placement_gym.flops import estimate_flops


def test_matmul_counts_two_flops_per_multiply_add() -> None:
    a = ops.parameter([1, 4, 8], np.float32)
    b = ops.parameter([1, 8, 3], np.float32)
    assert estimate_flops(ops.matmul(a, b, False, False)) == 2 * 4 * 3 * 8


def test_scaled_dot_product_attention_counts_both_products_and_the_softmax() -> None:
    # batch 1, 2 heads, 5 queries of width 4, 7 keys, values of width 6
    q = ops.parameter([1, 2, 5, 4], np.float32)
    k = ops.parameter([1, 2, 7, 4], np.float32)
    v = ops.parameter([1, 2, 7, 6], np.float32)
    sdpa = ops.scaled_dot_product_attention(q, k, v, causal=False)
    scores = 1 * 2 * 5 * 7
    assert estimate_flops(sdpa) == scores * (2 * 4 + 2 * 6 + 5)  # Q K^T, softmax, then times V
