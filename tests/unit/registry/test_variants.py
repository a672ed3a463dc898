"""The int8dyn variant: int8 linear weights with a scale per output row in safetensors, served by PyTorch's
dynamically quantized linear layers holding exactly those values."""

from __future__ import annotations

import torch
from safetensors.torch import load, save

from aigc.registry import variants


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 16), torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 50, bias=False))
    with torch.no_grad():
        model[1].weight[3] *= 40  # one row far larger than the rest: a scale per row keeps the others fine
    return model.eval()


def test_int8dyn_stores_int8_rows_and_decodes_within_half_a_step():
    state = _model().state_dict()
    tensors = load(save(variants.encode("int8dyn", state)))  # what the registry keeps and reads back
    weight, scale = tensors["1.weight"], tensors["1.weight.__scale"]
    assert weight.dtype == torch.int8 and scale.shape == (32,) and int(weight.abs().max()) == 127
    assert tensors["1.bias"].dtype == torch.float32  # biases stay fp32
    decoded, dtype = variants.decode("int8dyn", tensors)
    assert dtype == torch.float32 and set(decoded) == set(state)
    for name in ("0.weight", "1.weight", "3.weight"):
        step = tensors[name + ".__scale"][:, None]
        assert bool(((decoded[name] - state[name]).abs() <= step / 2 + 1e-7).all()), name
    nbytes = {name: sum(v.numel() * v.element_size() for v in d.values()) for name, d in (("int8", tensors),
                                                                                          ("fp32", state))}
    assert nbytes["int8"] < 0.35 * nbytes["fp32"]  # a quarter, plus the row scales and the fp32 biases


def test_swapped_linears_hold_the_stored_int8_values_and_answer_close_to_fp32():
    fp32 = _model()
    tensors = load(save(variants.encode("int8dyn", fp32.state_dict())))
    served = _model()
    served.load_state_dict(variants.decode("int8dyn", tensors)[0])
    assert variants.swap_dynamic_int8(served, tensors) == 2  # the two nn.Linear; the embedding is dequantized
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    assert isinstance(served[1], DynamicLinear) and isinstance(served[3], DynamicLinear)
    assert torch.equal(served[1].weight().int_repr(), tensors["1.weight"])  # not quantized again from fp32
    ids = torch.arange(50)
    with torch.no_grad():
        want, got = fp32(ids), served(ids)
    assert (got - want).abs().max() < 0.05 * want.abs().max()
