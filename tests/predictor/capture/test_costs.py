"""Our FLOPs and bytes formulas against closed-form values."""

from __future__ import annotations

import pytest

from predictor.emulator.capture.costs import bytes_moved, flops, op_class


def test_conv2d_forward_and_backward_closed_form():
    # N=2, C=3, 32x32 input, K=16 filters 3x3, stride 1, pad 1 -> output 2x16x32x32
    x, w, y = [2, 3, 32, 32], [16, 3, 3, 3], [2, 16, 32, 32]
    fwd = 2 * (2 * 16 * 32 * 32) * (3 * 3 * 3)
    assert flops("aten::conv2d", [x, w], [y]) == fwd
    assert flops("conv2d", [x, w, [16]], [y], bias=True) == fwd + 2 * 16 * 32 * 32
    assert flops("ConvolutionBackward0", [x, w], [y], backward=True) == 2 * fwd
    # grouped (depthwise) conv: weight (C, 1, 3, 3)
    assert flops("conv2d", [[1, 8, 10, 10], [8, 1, 3, 3]], [[1, 8, 8, 8]]) == 2 * (8 * 8 * 8) * 9


def test_linear_and_matmul_family():
    # (64, 512) @ (512 -> 1000)
    fwd = 2 * 64 * 1000 * 512
    assert flops("linear", [[64, 512], [1000, 512]], [[64, 1000]]) == fwd
    assert flops("linear", [[64, 512], [1000, 512], [1000]], [[64, 1000]], bias=True) == fwd + 64 * 1000
    assert flops("AddmmBackward0", [[1000], [64, 512], [512, 1000]], [[64, 1000]], backward=True) == 2 * fwd
    assert flops("aten::bmm", [[8, 128, 64], [8, 64, 128]], [[8, 128, 128]]) == 2 * 8 * 128 * 128 * 64
    assert flops("mm", [[3, 4], [4, 5]], [[3, 5]]) == 2 * 3 * 4 * 5


def test_other_classes():
    assert flops("batch_norm", [[2, 4, 8, 8]], [[2, 4, 8, 8]]) == 5 * 512
    assert flops("NativeBatchNormBackward0", [[2, 4, 8, 8]], [[2, 4, 8, 8]], backward=True) == 8 * 512
    assert flops("max_pool2d", [[1, 1, 8, 8]], [[1, 1, 4, 4]], kernel_size=[2, 2]) == 16 * 4
    assert flops("max_pool2d", [[1, 1, 8, 8]], [[1, 1, 4, 4]], kernel_size=3) == 16 * 9
    assert flops("adaptive_avg_pool2d", [[1, 2, 7, 7]], [[1, 2, 1, 1]]) == 98
    assert flops("relu", [[10, 10]], [[10, 10]]) == 100
    assert flops("gelu", [[10, 10]], [[10, 10]]) == 800
    assert flops("ReluBackward0", [[10, 10]], [[10, 10]], backward=True) == 200
    assert flops("embedding", [[1000, 64], [8, 16]], [[8, 16, 64]]) == 0
    assert flops("log_softmax", [[4, 10]], [[4, 10]]) == 200


def test_lstm_closed_form():
    # T=5, B=2, I=10, H=20, 1 layer: 2*4*H*(I+H)*B*T + 10*H*B*T
    expected = 2 * 4 * 20 * 30 * 2 * 5 + 10 * 20 * 2 * 5
    assert flops("lstm", [[5, 2, 10]], [[5, 2, 20]], hidden_size=20) == expected
    two = flops("lstm", [[5, 2, 10]], [[5, 2, 40]], hidden_size=20, num_layers=2, bidirectional=True)
    layer1 = 2 * (2 * 4 * 20 * 30 + 10 * 20) * 10
    layer2 = 2 * (2 * 4 * 20 * 60 + 10 * 20) * 10
    assert two == layer1 + layer2
    assert flops("lstm", [[5, 2, 10]], [[5, 2, 20]], backward=True, hidden_size=20) == 2 * expected
    with pytest.raises(ValueError, match="hidden_size"):
        flops("lstm", [[5, 2, 10]], [[5, 2, 20]])


def test_gru_and_elman_rnn_closed_form():
    # T=5, B=2, I=10, H=20, 1 layer: GRU 3 gates + 9 element-wise FLOPs per unit, RNN 1 gate + 2
    assert flops("aten::gru", [[5, 2, 10]], [], hidden_size=20) == 2 * 3 * 20 * 30 * 10 + 9 * 20 * 10
    assert flops("rnn_tanh", [[5, 2, 10]], [], hidden_size=20) == 2 * 1 * 20 * 30 * 10 + 2 * 20 * 10
    assert flops("rnn_relu", [[2, 5, 10]], [], hidden_size=20, batch_first=True) == \
        flops("rnn_tanh", [[5, 2, 10]], [], hidden_size=20)
    two = flops("gru", [[5, 2, 10]], [], hidden_size=20, num_layers=2, bidirectional=True)
    assert two == 2 * (2 * 3 * 20 * 30 + 9 * 20) * 10 + 2 * (2 * 3 * 20 * 60 + 9 * 20) * 10
    assert flops("GruBackward0", [[5, 2, 10]], [], backward=True, hidden_size=20) == \
        2 * flops("gru", [[5, 2, 10]], [], hidden_size=20)


def test_bytes_and_classes():
    assert bytes_moved([[2, 3], [3]], [[2, 3]], 4) == (6 + 3 + 6) * 4
    assert [op_class(o) for o in ("aten::convolution", "addmm", "layer_norm", "avg_pool2d", "softmax",
                                  "embedding", "lstm", "add_")] == \
        ["conv", "matmul", "norm", "pool", "softmax", "embedding", "lstm", "elementwise"]
    # every fused recurrent op is one class ("lstm"), the CPU's MKL-DNN layer included
    assert {op_class(o) for o in ("aten::gru", "rnn_tanh", "rnn_relu", "MkldnnRnnLayerBackward0")} == {"lstm"}
